"""Search answers natural-language questions: the labelled set of bench/search_eval.py (30 questions
over ~190 memories written for this project) keeps its recall above a floor."""

from __future__ import annotations

import sys
from pathlib import Path

import gitmem

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import search_eval  # noqa: E402


def test_questions_find_their_answer_in_the_top_five(workspace: Path) -> None:
    with gitmem.create_store("quality", home=workspace) as store:
        assert search_eval.seed(store) > 180
        at5 = search_eval.recall_at(store, 5)
        assert at5.recall >= 0.9, at5.missed
        assert search_eval.recall_at(store, 1).recall >= 0.8


def test_every_word_required_would_miss_most_questions(workspace: Path) -> None:
    """The floor means something: the same questions as all-words-must-match queries fail."""
    with gitmem.create_store("quality", home=workspace) as store:
        search_eval.seed(store)
        strict = [
            q
            for q, expected in search_eval.QUESTIONS
            if expected in [h.path for h in store.search(" AND ".join(q.rstrip("?").split()), limit=5)]
        ]
        assert len(strict) < len(search_eval.QUESTIONS) / 2
