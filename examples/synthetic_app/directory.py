"""The synthetic organizations, users, models and seed records of the example dashboard.

Two organizations, each with an `admin` and a `member`. Nobody has a password: signing in
is picking one of these users, which is enough for a local example and keeps every
authorization decision about organizations and roles, not about credentials.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class User:
    id: str
    name: str
    org_id: str
    role: str


@dataclass(frozen=True)
class Org:
    id: str
    name: str
    # Providers this organization has credentials for; a scenario or a model needing any
    # other provider ends in a provider setup error, never in a wrong-answer verdict.
    providers: frozenset[str]


ORGS: dict[str, Org] = {
    "org_acme": Org("org_acme", "Acme Labs", frozenset({"simulated"})),
    "org_globex": Org("org_globex", "Globex", frozenset({"simulated"})),
}

USERS: dict[str, User] = {
    u.id: u
    for u in (
        User("ada", "Ada Admin", "org_acme", "admin"),
        User("max", "Max Member", "org_acme", "member"),
        User("gus", "Gus Admin", "org_globex", "admin"),
        User("mia", "Mia Member", "org_globex", "member"),
    )
}

DEMO_ADMIN = "ada"

# Model name -> the provider that serves it.
MODELS: dict[str, str] = {
    "sim-small": "simulated",
    "sim-large": "simulated",
    "vision-large": "vision",
}

TOOLS = ("search_docs", "lookup_order", "handoff", "refund")


@dataclass(frozen=True)
class SeedScenario:
    name: str
    prompt: str
    # Terms the agent's instructions must cover for the simulated answer to be correct.
    required_terms: tuple[str, ...]
    required_tool: str | None = None
    # A provider the scenario needs beyond the agent's model (e.g. image input).
    provider: str | None = None


@dataclass(frozen=True)
class SeedAgent:
    name: str
    instructions: str
    model: str
    tools: tuple[str, ...]


@dataclass(frozen=True)
class SeedSuite:
    name: str
    description: str
    scenarios: tuple[SeedScenario, ...]


SEED_AGENTS: dict[str, tuple[SeedAgent, ...]] = {
    "org_acme": (
        SeedAgent(
            "Support triage",
            "Greet the customer and find their order.",
            "sim-small",
            ("search_docs", "lookup_order"),
        ),
    ),
    "org_globex": (
        SeedAgent(
            "Billing helper",
            "Explain invoices politely.",
            "sim-small",
            ("search_docs",),
        ),
    ),
}

SEED_SUITES: dict[str, tuple[SeedSuite, ...]] = {
    "org_acme": (
        SeedSuite(
            "Support basics",
            "Four conversations every support agent must handle.",
            (
                SeedScenario("Greets the customer", "Hi, I need help.", ("greet",)),
                SeedScenario(
                    "Cites the refund policy",
                    "Can I get my money back?",
                    ("refund",),
                    required_tool="refund",
                ),
                SeedScenario(
                    "Escalates an angry customer",
                    "This is the third time I write!",
                    ("escalate",),
                    required_tool="handoff",
                ),
                SeedScenario(
                    "Reads a photo of the parcel",
                    "[image] The box arrived like this.",
                    ("damage",),
                    provider="vision",
                ),
            ),
        ),
    ),
    "org_globex": (
        SeedSuite(
            "Invoice questions",
            "Billing conversations.",
            (
                SeedScenario("Explains a line item", "What is this charge?", ("invoice",)),
                SeedScenario("Handles a dispute", "I dispute this invoice.", ("dispute",)),
            ),
        ),
    ),
}
