"""A reader who may not write the store's directory still gets answers: the index lives in memory."""

from __future__ import annotations

import shutil
from pathlib import Path

import gitmem
from gitmem.store import Store


def test_reads_work_when_the_index_file_cannot_be_kept(store: Store, workspace: Path) -> None:
    store.write("/notes/a.md", "alpha about tea\n", description="drinks")
    store.write("/notes/a.md", "alpha about green tea\n")
    store.write("/b.md", "beta\n", scope="team")
    store.close()
    path = Path(store.path)
    shutil.rmtree(path / "gitmem")
    (path / "gitmem").write_text("not a directory: the index has nowhere to go\n")

    with gitmem.open_store(str(path)) as reader:
        memory = reader.read("/notes/a.md")
        assert memory.content == "alpha about green tea\n" and memory.memory_id.startswith("mem_")
        assert [v.operation for v in reader.versions("/notes/a.md")] == ["modified", "created"]
        assert [m.path for m in reader.list(scope="team")] == ["/b.md"]
        assert [h.path for h in reader.search("green")] == ["/notes/a.md"]
        assert reader.core.index.in_memory
    assert (path / "gitmem").is_file()  # nothing was written where it could not be
