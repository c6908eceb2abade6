"""Tool declarations: names, bounds and the catalog an identity sees."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from gateway.core.identity import TaskIdentity
from gateway.core.registry import Registry, Tool, ToolAnnotations, ToolContext
from tests.core_fixtures import identity


class Args(BaseModel):
    path: str


async def handler(_ctx: ToolContext, _args: Args) -> None:
    return None


@pytest.mark.parametrize("name", ["", "a b", "a/b", "ü", "x" * 129, "tool;drop"])
def test_bad_tool_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="tool name"):
        Tool(name, "t", "d", Args, handler)


def test_duplicate_names_are_refused() -> None:
    registry = Registry([Tool("a.b", "t", "d", Args, handler)])
    with pytest.raises(ValueError, match="already"):
        registry.add(Tool("a.b", "t", "d", Args, handler))


def test_catalog_entries_carry_schema_and_hints() -> None:
    registry = Registry()

    @registry.tool(
        "files.read",
        title="Read",
        description="Read a file",
        input_model=Args,
        scopes=["files"],
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def read(_ctx: ToolContext, _args: Args) -> None:
        return None

    entry = registry.catalog(identity(scopes=["files"]))[0]
    assert (entry["name"], entry["tool_id"]) == ("files_read", "files.read")
    assert entry["input_schema"]["required"] == ["path"]
    assert entry["annotations"]["readOnlyHint"] is True
    assert registry.catalog(identity(scopes=["other"])) == []


def test_catalog_filters_by_role_scope_and_allowlist() -> None:
    registry = Registry(
        [
            Tool("a.one", "t", "d", Args, handler, scopes=frozenset({"s"})),
            Tool(
                "a.admin",
                "t",
                "d",
                Args,
                handler,
                scopes=frozenset({"s"}),
                roles=frozenset({"admin"}),
            ),
            Tool("b.two", "t", "d", Args, handler, scopes=frozenset({"s"})),
        ]
    )

    def names(ident: TaskIdentity) -> list[str]:
        return [t["tool_id"] for t in registry.catalog(ident)]

    assert names(identity(scopes=["s"])) == ["a.admin", "a.one", "b.two"]
    assert names(identity(scopes=["s"], role="member")) == ["a.one", "b.two"]
    assert names(identity(scopes=["s"], allowed_tools=["a.*"])) == ["a.admin", "a.one"]


def _tool(name: str) -> Tool:
    async def handler(_ctx: ToolContext, _args: Args) -> None:
        return None

    return Tool(name=name, title=name, description=name, input_model=Args, handler=handler)


def test_tools_are_listed_under_client_safe_names_and_answer_both() -> None:
    registry = Registry([_tool("browser.navigate"), _tool("app.save-draft")])
    assert [t.exposed_name for t in registry] == ["browser_navigate", "app_save-draft"]
    assert registry.get("browser.navigate") is registry.get("browser_navigate")
    assert registry.get("app_save-draft") is not None
    assert registry.get("browser-navigate") is None


@pytest.mark.parametrize(
    ("first", "second"),
    [("a.b", "a_b"), ("a_b", "a.b"), ("x.y.z", "x_y.z"), ("one.two", "one_two")],
)
def test_two_tools_with_one_listed_name_fail_at_registration(first: str, second: str) -> None:
    registry = Registry([_tool(first)])
    with pytest.raises(ValueError, match="already answers"):
        registry.add(_tool(second))
    assert len(registry) == 1


def test_a_name_too_long_for_clients_fails_at_registration() -> None:
    with pytest.raises(ValueError, match="at most 64"):
        _tool("app." + "x" * 61)
    assert _tool("app." + "x" * 60).exposed_name == "app_" + "x" * 60
