"""A labelled search set written for gitmem: natural-language questions over a store of ~200 memories.

Each question has one memory that answers it. The other memories are near misses on purpose: the same
people with other facts, other people with the same kind of fact, notes that share only common words.
``recall_at(store, k)`` is the share of questions whose answer is among the first ``k`` hits of
``Store.search`` (``bench/search_bench.py`` reports it; ``tests/engine/test_search_quality.py`` holds a floor).
"""

from __future__ import annotations

from dataclasses import dataclass

from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.store import Store

PEOPLE = [
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yvonne",
]  # fmt: skip
DRINKS = ["tea", "black coffee", "sparkling water", "oat latte", "green tea", "hot chocolate", "espresso"]
FOODS = ["vegetarian", "no peanuts", "gluten free", "loves sushi", "vegan", "no shellfish", "halal"]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Montreal", "Osaka", "Valparaiso", "Tallinn", "Dublin"]
LANGS = ["Rust", "Go", "TypeScript", "Haskell", "Kotlin", "Elixir", "C++", "Python"]
TIMES = ["early mornings", "after lunch", "late evenings", "Tuesdays only", "Friday afternoons"]

# The memories that answer the questions (path, description, content).
ANSWERS: list[tuple[str, str, str]] = [
    ("/people/alice/drinks.md", "Alice's drink order", "Alice: prefers tea, no sugar, milk on the side."),
    (
        "/people/bob/allergies.md",
        "Bob's allergies",
        "Bob is allergic to penicillin; carries an epipen for bee stings.",
    ),
    (
        "/projects/atlas/deploy.md",
        "How Atlas is deployed",
        "Atlas ships with a blue-green rollout on the staging cluster first, then production after a smoke test.",
    ),
    ("/projects/atlas/owner.md", "Who owns Atlas", "Carol leads the Atlas project; escalate outages to her."),
    (
        "/infra/database.md",
        "Primary database",
        "The primary database is PostgreSQL 15 on db-primary, with a streaming replica on db-replica.",
    ),
    (
        "/infra/backups.md",
        "Backup policy",
        "Nightly backups run at 02:00 UTC and are kept for 35 days in cold storage.",
    ),
    (
        "/people/dave/timezone.md",
        "Dave's timezone",
        "Dave works from Auckland (NZDT); avoid meetings before 8pm UTC.",
    ),
    (
        "/people/erin/birthday.md",
        "Erin's birthday",
        "Erin was born on 14 March; she likes a card, not a cake.",
    ),
    (
        "/support/refunds.md",
        "Refund rules",
        "Customers can get a full refund within 30 days of purchase; after that, store credit only.",
    ),
    (
        "/support/escalation.md",
        "Escalation path",
        "Severity 1 tickets page the on-call engineer immediately; severity 2 waits for business hours.",
    ),
    (
        "/people/frank/editor.md",
        "Frank's editor",
        "Frank writes code in Emacs with evil mode and refuses to switch.",
    ),
    (
        "/people/grace/pet.md",
        "Grace's pet",
        "Grace has a greyhound called Biscuit who comes to the office on Fridays.",
    ),
    (
        "/projects/beacon/deadline.md",
        "Beacon deadline",
        "Beacon must be feature-complete by 30 June for the board demo.",
    ),
    (
        "/projects/beacon/stack.md",
        "Beacon stack",
        "Beacon's front end is Svelte; the API is written in Go behind Envoy.",
    ),
    (
        "/infra/vpn.md",
        "VPN access",
        "Connect to the office network with WireGuard; ask IT for a peer config file.",
    ),
    (
        "/people/heidi/parking.md",
        "Heidi's parking",
        "Heidi parks in spot 42 in the north garage and lends it out when travelling.",
    ),
    (
        "/style/commit-messages.md",
        "Commit message style",
        "Write commit subjects in the imperative mood, under 72 characters, no trailing period.",
    ),
    (
        "/style/reviews.md",
        "Code review etiquette",
        "Approve a pull request only after running the tests locally; nitpicks are prefixed with nit.",
    ),
    (
        "/people/ivan/languages.md",
        "Languages Ivan speaks",
        "Ivan speaks Russian, Spanish and a little Portuguese.",
    ),
    (
        "/people/judy/role.md",
        "Judy's role",
        "Judy is the security officer and signs off on every penetration test report.",
    ),
    (
        "/travel/expenses.md",
        "Travel expenses",
        "Hotel nights are reimbursed up to 180 EUR; taxis need a receipt, trains go second class.",
    ),
    (
        "/travel/booking.md",
        "Booking trips",
        "Book flights through the travel portal at least two weeks ahead.",
    ),
    (
        "/people/olivia/meetings.md",
        "When Olivia meets",
        "Olivia prefers meetings in the early morning and blocks her afternoons for deep work.",
    ),
    (
        "/infra/monitoring.md",
        "Monitoring",
        "Dashboards live in Grafana; alerts go to the #ops-alerts channel through Alertmanager.",
    ),
    (
        "/projects/comet/risks.md",
        "Comet risks",
        "The biggest risk for Comet is the vendor's rate limit of 100 requests per minute.",
    ),
    (
        "/people/peggy/diet.md",
        "Peggy's diet",
        "Peggy is vegan; order the falafel platter when she joins a team lunch.",
    ),
    (
        "/office/wifi.md",
        "Office wifi",
        "The guest wifi network is called Harbour-Guest and the password rotates every Monday.",
    ),
    (
        "/office/kitchen.md",
        "Kitchen rules",
        "Label food in the fridge with your name; the fridge is emptied every Friday at 5pm.",
    ),
    (
        "/people/trent/hobby.md",
        "Trent's hobby",
        "Trent climbs at the bouldering gym on Wednesdays and organises the climbing club.",
    ),
    (
        "/projects/atlas/metrics.md",
        "Atlas success metrics",
        "Atlas is a success if checkout latency stays under 300 ms at the 99th percentile.",
    ),
]

QUESTIONS: list[tuple[str, str]] = [
    ("What does Alice prefer to drink?", "/people/alice/drinks.md"),
    ("Is Bob allergic to anything?", "/people/bob/allergies.md"),
    ("How do we deploy Atlas?", "/projects/atlas/deploy.md"),
    ("Who is in charge of the Atlas project?", "/projects/atlas/owner.md"),
    ("Which database do we use in production?", "/infra/database.md"),
    ("How long are backups kept?", "/infra/backups.md"),
    ("What timezone is Dave in?", "/people/dave/timezone.md"),
    ("When is Erin's birthday?", "/people/erin/birthday.md"),
    ("Can a customer get a refund after two weeks?", "/support/refunds.md"),
    ("What happens with a severity 1 ticket?", "/support/escalation.md"),
    ("Which editor does Frank use?", "/people/frank/editor.md"),
    ("What is the name of Grace's dog?", "/people/grace/pet.md"),
    ("When is the Beacon deadline?", "/projects/beacon/deadline.md"),
    ("What language is the Beacon API written in?", "/projects/beacon/stack.md"),
    ("How do I connect to the VPN?", "/infra/vpn.md"),
    ("Where does Heidi park?", "/people/heidi/parking.md"),
    ("How should commit messages be written?", "/style/commit-messages.md"),
    ("What are the rules for approving a pull request?", "/style/reviews.md"),
    ("Which languages does Ivan speak?", "/people/ivan/languages.md"),
    ("Who signs off on penetration tests?", "/people/judy/role.md"),
    ("How much can I spend on a hotel?", "/travel/expenses.md"),
    ("How early should flights be booked?", "/travel/booking.md"),
    ("When does Olivia like to have meetings?", "/people/olivia/meetings.md"),
    ("Where do alerts go?", "/infra/monitoring.md"),
    ("What is the main risk for Comet?", "/projects/comet/risks.md"),
    ("What should we order for Peggy at lunch?", "/people/peggy/diet.md"),
    ("What is the guest wifi called?", "/office/wifi.md"),
    ("When is the fridge emptied?", "/office/kitchen.md"),
    ("What does Trent do on Wednesdays?", "/people/trent/hobby.md"),
    ("How do we measure whether Atlas is a success?", "/projects/atlas/metrics.md"),
]


@dataclass(frozen=True)
class Evaluation:
    k: int
    questions: int
    found: int
    missed: list[tuple[str, str, list[str]]]  # question, expected path, what came back

    @property
    def recall(self) -> float:
        return self.found / self.questions


def distractors() -> list[tuple[str, str, str]]:
    """~170 near misses: every person's other facts, and notes sharing only common words."""
    out: list[tuple[str, str, str]] = []
    for i, person in enumerate(PEOPLE):
        name = person.capitalize()
        out.append(
            (
                f"/people/{person}/coffee-order.md",
                f"{name}'s order",
                f"{name} orders {DRINKS[i % len(DRINKS)]} at the cafe downstairs.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/people/{person}/food.md",
                f"{name}'s food",
                f"{name}: {FOODS[i % len(FOODS)]} when the team eats out.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/people/{person}/home.md",
                f"Where {name} lives",
                f"{name} lives in {CITIES[i % len(CITIES)]} and visits the office monthly.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/people/{person}/skills.md",
                f"{name}'s skills",
                f"{name} is strongest in {LANGS[i % len(LANGS)]} and mentors juniors.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/people/{person}/availability.md",
                f"{name}'s hours",
                f"{name} is easiest to reach {TIMES[i % len(TIMES)]}.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/people/{person}/notes.md",
                None,
                f"Met {name} about the quarterly plan; follow up next week on the budget.",
            )
        )  # type: ignore[arg-type]  # noqa: E501
    for project in ("atlas", "beacon", "comet", "delta", "ember"):
        out.append(
            (
                f"/projects/{project}/status.md",
                f"{project} status",
                f"{project.capitalize()} is on track; next milestone review is in two weeks.",
            )
        )  # noqa: E501
        out.append(
            (
                f"/projects/{project}/meeting-notes.md",
                None,
                f"Weekly {project} sync: discussed the roadmap, hiring and the demo.",
            )
        )  # type: ignore[arg-type]  # noqa: E501
        out.append((f"/projects/{project}/links.md", "links", f"Tracker, wiki and dashboards for {project}."))
    for n in range(25):
        out.append(
            (
                f"/journal/2026-{n % 12 + 1:02d}-{n + 1:02d}.md",
                None,
                f"Day {n}: what a week. Worked on the release, fixed a flaky test, wrote docs, had lunch with the team.",
            )
        )  # type: ignore[arg-type]  # noqa: E501
    return out


def seed(store: Store, scope: str = "main") -> int:
    """Write the answers and the distractors as one batch; returns the number of memories."""
    rows = ANSWERS + distractors()
    ops = [BatchOp("write", path, text, description=desc) for path, desc, text in rows]
    apply_batch(store.core, ops, scope=scope, actor="user:eval")
    return len(rows)


def recall_at(store: Store, k: int = 5, scope: str = "main") -> Evaluation:
    found, missed = 0, []
    for question, expected in QUESTIONS:
        hits = [h.path for h in store.search(question, scope=scope, limit=k)]
        if expected in hits:
            found += 1
        else:
            missed.append((question, expected, hits))
    return Evaluation(k, len(QUESTIONS), found, missed)
