"""embeval.config.from_mapping: the one reader of plain-data configs."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from embeval.config import from_mapping, opts
from embeval.errors import ConfigError


@dataclass
class Inner:
    a: int = 1
    b: tuple = (0.0, 0.0)


@dataclass
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    many: list[Inner] = field(default_factory=list)
    maybe: Inner | None = None


def test_nested_and_defaults():
    o = from_mapping(Outer, {"name": "x", "inner": {"a": 3}, "many": [{"a": 4}, {"b": [1, 2]}], "maybe": {"a": 5}}, "spec")
    assert o.inner == Inner(3) and o.many == [Inner(4), Inner(1, [1, 2])] and o.maybe == Inner(5)
    assert from_mapping(Outer, {"name": "y"}, "spec") == Outer("y")


def test_unknown_key_names_it_suggests_and_lists():
    with pytest.raises(ConfigError) as e:
        from_mapping(Outer, {"name": "x", "inner": {"aa": 1}}, "spec")
    assert str(e.value) == "spec.inner.aa: unknown field; did you mean 'a'? allowed: a, b"
    with pytest.raises(ConfigError) as e:
        from_mapping(Outer, {"name": "x", "inner": {"aa": 1, "zz": 2}}, "spec")
    assert str(e.value) == "spec.inner: unknown fields 'aa' (did you mean 'a'?), 'zz'; allowed: a, b"


def test_not_a_mapping_and_missing_field():
    with pytest.raises(ConfigError, match="spec must be a mapping, got list"):
        from_mapping(Outer, [1], "spec")
    with pytest.raises(ConfigError, match="spec: .*missing 1 required positional argument: 'name'"):
        from_mapping(Outer, {}, "spec")


def test_used_by_the_config_dataclasses():
    from embeval.act2answer.scene import EpisodeSpec
    from embeval.robot.safety import SafetyLimits
    from embeval.sim.scene import SceneSpec
    from embeval.sim.tasks import TaskSpec

    for cls, bad in ((SafetyLimits, {"max_tcp_sped": 1}), (EpisodeSpec, {"epss": 1}), (TaskSpec, {"verbb": "Pick"}),
                     (SceneSpec, {"objectz": []})):
        with pytest.raises(ConfigError, match="unknown field.*did you mean"):
            cls.from_dict(bad)


@dataclass(frozen=True)
class Leaf:
    n: int = field(default=1, metadata=opts(min=1))
    rate: float | None = field(default=None, metadata=opts(min=0))
    tags: tuple[str, ...] = field(default=(), metadata=opts(unique=True, scalar=True))
    mode: str = field(default="a", metadata=opts(choices=("a", "b"), noun="mode"))


@dataclass(frozen=True)
class Root:
    name: str
    leaf: Leaf = field(default_factory=Leaf)
    leaves: tuple[Leaf, ...] = ()
    opts_: dict = field(default_factory=dict)
    fixed: str = field(default="", metadata=opts(config=False))

    def check_config(self, where):
        if self.name == "bad":
            raise ConfigError(f"{where}.name: may not be 'bad'")


def test_strict_checks_types_and_options_naming_the_field():
    r = from_mapping(Root, {"name": "x", "leaf": {"rate": 2, "tags": "t"}, "leaves": [{"n": 3}], "opts_": None},
                     "spec", strict=True)
    assert r == Root("x", Leaf(rate=2.0, tags=("t",)), (Leaf(n=3),), {})
    assert isinstance(r.leaf.rate, float) and isinstance(r.leaves, tuple)
    bad = [({}, "spec.name: must be a non-empty string, got None"),
           ({"name": ""}, "spec.name: must be a non-empty string, got ''"),
           ({"name": "x", "leaf": {"n": 0}}, "spec.leaf.n: must be >= 1, got 0"),
           ({"name": "x", "leaf": {"n": True}}, "spec.leaf.n: must be an integer >= 1, got True"),
           ({"name": "x", "leaf": {"rate": float("inf")}}, "spec.leaf.rate: must be a finite number >= 0, got inf"),
           ({"name": "x", "leaf": {"tags": ["a", "a"]}}, "spec.leaf.tags: duplicate entry 'a'"),
           ({"name": "x", "leaf": {"tags": {"a": 1}}}, "spec.leaf.tags: must be a list, got dict"),
           ({"name": "x", "leaf": {"mode": "c"}}, "spec.leaf.mode: unknown mode 'c'; choose from a, b"),
           ({"name": "x", "leaf": {"mode": ["c"]}}, "spec.leaf.mode: unknown mode ['c']; choose from a, b"),
           ({"name": "x", "leaves": [{}, {"n": -1}]}, "spec.leaves[1].n: must be >= 1, got -1"),
           ({"name": "x", "leaves": [3]}, "spec.leaves[0]: must be a mapping, got int 3"),
           ({"name": "x", "opts_": [1]}, "spec.opts_: must be a mapping, got list [1]"),
           ({"name": "bad"}, "spec.name: may not be 'bad'")]
    for data, msg in bad:
        with pytest.raises(ConfigError) as e:
            from_mapping(Root, data, "spec", strict=True)
        assert str(e.value) == msg, (data, str(e.value))
    with pytest.raises(ConfigError, match=r"spec.fixed: unknown field; allowed: leaf, leaves, name, opts_$"):
        from_mapping(Root, {"name": "x", "fixed": "y"}, "spec", strict=True)
