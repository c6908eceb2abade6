"""Validated inputs shared by the dashboard's forms, its JSON API and its product tools."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from examples.synthetic_app.directory import MODELS, TOOLS

Id = Annotated[str, StringConstraints(min_length=1, max_length=40, pattern=r"^[a-z]+_[0-9a-f]+$")]

MAX_SCENARIOS = 20


class DraftFields(BaseModel):
    """Fields of an agent draft; any subset may be given, the rest keep their value."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=120)
    instructions: str | None = Field(default=None, max_length=8000)
    model: str | None = Field(default=None, description=f"one of {', '.join(MODELS)}")
    tools: list[str] | None = Field(
        default=None, max_length=len(TOOLS), description=f"a subset of {', '.join(TOOLS)}"
    )

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None and value not in MODELS:
            raise ValueError(f"unknown model {value[:64]!r}; known: {', '.join(MODELS)}")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [t for t in value if t not in TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown[:4]!r}; known: {', '.join(TOOLS)}")
        return list(dict.fromkeys(value))

    def given(self) -> dict[str, object]:
        return self.model_dump(exclude_none=True)


class RunBudget(BaseModel):
    """What one scenario of a run may spend; a scenario over it fails as `budget_exceeded`."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=2000, ge=100, le=20000)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: Id
    suite_id: Id
    scenario_ids: list[Id] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SCENARIOS,
        description="the scenarios to run (default: the whole suite)",
    )
    budget: RunBudget = RunBudget()
