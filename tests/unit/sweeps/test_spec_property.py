"""Property tests: random specs and config overrides either validate or fail with a clear, one-line message.

Any exception other than ConfigError/SpecError (a traceback from deep inside: KeyError, TypeError,
AttributeError, OverflowError, ...) fails the test. Nothing here starts Ray or trains.
"""
from __future__ import annotations

import copy

from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from ssat.config import METHODS, SCHEDULES, Config, ConfigError, from_dict
from ssat.presets import preset
from sweeps.search_spec import SEARCH_KEYS
from sweeps.spec import SPEC_KEYS, Spec, parse_spec

DOTTED = sorted(Config().to_flat())                       # every real dotted key, plus "seed"
SECTIONS = sorted({k.split(".")[0] for k in DOTTED if "." in k})
FIELDS = SPEC_KEYS | SEARCH_KEYS | set(DOTTED) | set(SECTIONS) | {"--epochs", "unknown key", "override key",
                                                                  "config"}
PRESET_NAMES = ["mnist5k-ssat-mbi", "mnist5k-rst", "mnist5k-trades", "mnist5k-standard", "mnist5k-ssat-mbi-awr",
                "cifar10-ssat-mbi"]
SETTINGS = settings(max_examples=150, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_clear(exc: Exception) -> None:
    """A single readable sentence that names a key or field."""
    msg = str(exc)
    note(f"message: {msg}")
    assert isinstance(exc, ConfigError), type(exc)
    assert msg.strip(), "empty message"
    assert "Traceback" not in msg and "\n" not in msg, msg
    assert " object at 0x" not in msg, msg
    assert any(f in msg for f in FIELDS), f"no key or field named in: {msg}"


# Epoch numbers that --epochs rescales after the row's values are applied.
RESCALED = {"optim.epochs", "optim.lr_milestones", "optim.swa_start", "attack.t", "method.rho_double_epoch"}


def visible(given, stored) -> bool:
    """An accepted value shows in Config.to_flat(), up to the config's gentle coercion: 'none'/'null' -> None,
    'on'/'yes'/'true' -> True, '5' or 5 -> 5 or 5.0, a tuple or '[1, 2]' -> a list, true/false -> a switch's
    'on'/'off'."""
    if isinstance(stored, list):
        if isinstance(given, str):
            given = [v for v in given.replace("[", "").replace("]", "").split(",") if v.strip()]
        return (isinstance(given, (list, tuple)) and len(given) == len(stored)
                and all(visible(g, v) for g, v in zip(given, stored)))
    if stored is None:
        return given is None or (isinstance(given, str) and given.lower() in ("none", "null"))
    if isinstance(stored, bool):
        return given is stored or (isinstance(given, str)
                                   and given.lower() in (("true", "yes", "on") if stored else ("false", "no", "off")))
    if isinstance(stored, (int, float)):
        return not isinstance(given, bool) and float(given) == stored
    if isinstance(given, bool) and stored in ("on", "off"):  # a switch (YAML reads `off` as false)
        return given == (stored == "on")
    return given == stored


def check_carries(cfg: Config, overrides: dict, skip=()) -> None:
    """Every override key of an accepted config holds the value given."""
    flat = cfg.to_flat()
    for key, value in overrides.items():
        if key not in skip:
            assert visible(value, flat[key]), (key, value, flat[key])


def check_valid_spec(spec: Spec, raw: dict, epochs) -> None:
    """A spec that validated carries what it says: seeds, rows, overrides, sampled values."""
    seeds = raw.get("seeds", [0])
    assert spec.seeds == seeds and spec.name == raw["name"] and spec.preset == raw["preset"]
    assert spec.max_concurrent == raw.get("max_concurrent", 1)
    overrides = raw.get("overrides") or {}
    skip = RESCALED if epochs or raw.get("epochs") else set()
    if spec.grid:
        trials = spec.trials()
        assert len(trials) == len(spec.grid) * len(seeds)
        assert [(t.row, t.seed) for t in trials] == [(r["row"], s) for r in spec.grid for s in seeds]
        for t in trials:
            row = next(r for r in spec.grid if r["row"] == t.row)
            assert t.config.seed == t.seed and t.stage == spec.stage
            check_carries(t.config, row["set"], skip=skip | {"seed"})
            check_carries(t.config, {k: v for k, v in overrides.items() if k not in row["set"] and not row["preset"]},
                          skip=skip | {"seed"})
    else:
        from sweeps.space import corner_configs

        assert spec.search["num_samples"] == raw["search"].get("num_samples", 10)
        for sampled in corner_configs(spec.search["space"]):
            cfg = spec.config_for(sampled, seeds[0])
            assert cfg.seed == seeds[0]
            check_carries(cfg, sampled, skip={"seed"})


# ---- strategies ------------------------------------------------------------------------------------------
def _mutate(key: str, i: int, how: str) -> str:
    i %= len(key)
    out = {"drop": key[:i] + key[i + 1:], "dup": key[:i] + key[i] + key[i:], "swap": key[:i] + key[i + 1:i + 2]
           + key[i:i + 1] + key[i + 2:], "case": key[:i] + key[i:].upper(), "under": key.replace(".", "_")}[how]
    return out


def typos(words) -> st.SearchStrategy[str]:
    return st.builds(_mutate, st.sampled_from(sorted(words)), st.integers(0, 40),
                     st.sampled_from(["drop", "dup", "swap", "case", "under"]))


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 130), st.integers(), st.floats(), st.floats(0, 1),
    st.text(max_size=6),
    st.sampled_from(["none", "null", "5", "[1, 2]", "nan", "inf", "true", "off", *SCHEDULES, *METHODS, "cnn-small",
                     "wrn-16-1", "mnist5k", "cifar10", "kl", "ce", "cpu", "bf16", "normal"]),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.tuples(SCALARS),
                   st.dictionaries(st.text(max_size=4), SCALARS, max_size=2))
KEYS = st.one_of(st.sampled_from(DOTTED), st.sampled_from(DOTTED), typos(DOTTED), st.sampled_from(SECTIONS),
                 st.text(max_size=10), st.integers(), st.none())
# overrides a user would plausibly write: right keys, values in and just outside their ranges
PLAUSIBLE = st.one_of(
    st.tuples(st.just("method.beta"), st.floats(-0.5, 1.5)), st.tuples(st.just("method.rho0"), st.floats(-0.1, 1.1)),
    st.tuples(st.just("method.tau"), st.floats(-1, 5)), st.tuples(st.just("method.K"), st.integers(-1, 6)),
    st.tuples(st.just("attack.gamma"), st.floats(0.5, 2)), st.tuples(st.just("attack.t"), st.integers(-1, 15)),
    st.tuples(st.just("attack.schedule"), st.sampled_from(SCHEDULES + ("cosine",))),
    st.tuples(st.just("method.rho_double_epoch"), st.one_of(st.none(), st.integers(0, 15))),
    st.tuples(st.just("method.interpolate"), st.booleans()),
    st.tuples(st.just("optim.epochs"), st.integers(0, 15)),
    st.tuples(st.just("optim.lr_milestones"), st.lists(st.integers(0, 12), max_size=3)),
    st.tuples(st.just("data.n_unlabeled"), st.integers(-1, 500)),
    st.tuples(st.just("system.cuda_memory_fraction"), st.floats(0, 2)),
    st.tuples(st.just("model.name"), st.sampled_from(["cnn-small", "wrn-16-1", "wrn-16-2"])),
)
NUMS = st.one_of(st.integers(-2, 4), st.floats(-1, 2), st.floats(), st.booleans(), st.text(max_size=3),
                  st.none())
OVERRIDES = st.one_of(st.just({}), st.lists(PLAUSIBLE, max_size=3).map(dict),
                      st.dictionaries(KEYS, VALUES, max_size=3))
OPTIONAL = {
    "overrides": st.one_of(OVERRIDES, VALUES), "epochs": st.one_of(st.integers(-1, 12), st.integers(), NUMS),
    "seeds": st.one_of(st.lists(st.integers(-3, 5), max_size=3), st.lists(SCALARS, max_size=2), SCALARS),
    "resources": st.one_of(st.fixed_dictionaries({}, optional={"cpu": NUMS, "gpu": NUMS, "gpus": NUMS}), VALUES),
    "max_concurrent": NUMS,
    "metric": st.one_of(st.sampled_from(["val/pgd10", "val/clean", "acc"]),
                        st.lists(st.sampled_from(["val/pgd10", "val/clean"]), max_size=3), VALUES),
    "mode": st.one_of(st.sampled_from(["max", "min", "maximize"]),
                      st.lists(st.sampled_from(["max", "min"]), max_size=3), VALUES),
    "stage": st.one_of(st.sampled_from(["grid", "search", "confirm", "demo", "final"]), VALUES),
    "table": VALUES, "column_group": VALUES, "expected_seeds": NUMS, "description": VALUES,
}
NESTED = st.dictionaries(st.one_of(st.sampled_from(SECTIONS + ["seed"]), typos(SECTIONS)),
                         st.one_of(st.dictionaries(st.one_of(st.sampled_from(sorted({k.split(".")[-1]
                                                                                     for k in DOTTED})),
                                                             st.text(max_size=5)), VALUES, max_size=2), VALUES),
                         max_size=2)

NAMES = st.one_of(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,20}\Z"),
                  st.sampled_from(["../x", "a/b", "..", "/abs", "a..b", "a" * 101, "ok\n", "", " x"]),
                  st.text(max_size=12), st.integers(), st.none())
PRESETS = st.one_of(st.sampled_from(PRESET_NAMES), st.sampled_from(PRESET_NAMES), typos(PRESET_NAMES),
                    st.integers(), st.none())
WHEN = st.one_of(st.dictionaries(st.sampled_from(["attack.schedule", "method.interpolate", "method.beta"]),
                                 st.lists(SCALARS, max_size=2), max_size=1), VALUES)
DIST = st.one_of(
    st.fixed_dictionaries({"choice": st.lists(SCALARS, max_size=3)}, optional={"when": WHEN}),
    st.fixed_dictionaries({"float": st.lists(st.one_of(st.floats(-1, 10), st.integers(-1, 10)), max_size=3)},
                          optional={"log": st.booleans(), "when": WHEN}),
    st.fixed_dictionaries({"int": st.lists(st.integers(-2, 12), max_size=3)},
                          optional={"log": st.booleans(), "when": WHEN}),
    st.dictionaries(st.sampled_from(["choice", "float", "int", "log", "when", "chioce", "flot"]), VALUES, max_size=2),
    VALUES,
)
SPACE_KEYS = st.one_of(st.sampled_from(["method.beta", "method.rho0", "attack.schedule", "attack.t", "attack.gamma",
                                        "method.K", "method.tau"]), KEYS)
SEARCH = st.one_of(
    st.fixed_dictionaries({"space": st.dictionaries(SPACE_KEYS, DIST, max_size=3)}, optional={
        "num_samples": st.one_of(st.integers(-1, 30), VALUES),
        "early_stopping": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
            "grace_period": st.one_of(st.integers(-1, 12), VALUES), "reduction_factor": NUMS}), VALUES),
        "confirm": st.one_of(st.fixed_dictionaries({}, optional={
            "top_k": st.one_of(st.integers(-1, 4), VALUES),
            "seeds": st.one_of(st.lists(st.integers(-2, 120), max_size=3), VALUES)}), VALUES),
        "sampler_seed": st.one_of(st.integers(-1, 2**33), VALUES),
        **{k: VALUES for k in ("spcae", "num_sample")}}),
    VALUES,
)
ROWS = st.fixed_dictionaries({"row": st.one_of(st.text(max_size=6), st.integers())},
                             optional={"set": st.one_of(OVERRIDES, VALUES), "preset": st.one_of(PRESETS, VALUES),
                                       "sett": VALUES})
GRID = st.one_of(st.lists(st.one_of(ROWS, ROWS, VALUES), max_size=3),
                 st.fixed_dictionaries({"product": st.one_of(
                     st.dictionaries(KEYS, st.lists(SCALARS, min_size=1, max_size=2), max_size=2), VALUES)}),
                 VALUES)


VALID_GRID = {"name": "prop", "preset": "mnist5k-ssat-mbi", "seeds": [0, 1], "resources": {"cpu": 1, "gpu": 0.25},
              "grid": [{"row": "const|off", "set": {"attack.schedule": "const", "method.interpolate": False}},
                       {"row": "curious|on", "set": {"attack.t": 5}}]}
VALID_SEARCH = {"name": "prop", "preset": "mnist5k-ssat-mbi", "seeds": [0],
                "search": {"num_samples": 4,
                           "space": {"attack.schedule": {"choice": ["const", "linear", "curious"]},
                                     "attack.t": {"int": [2, 8], "when": {"attack.schedule": ["linear", "curious"]}},
                                     "method.beta": {"float": [0.0, 1.0]}},
                           "early_stopping": {"grace_period": 8}, "confirm": {"top_k": 2, "seeds": [10, 11]}}}


MOSTLY = st.sampled_from([True, True, True, False])


@st.composite
def noisy_specs(draw) -> dict:
    """Specs assembled key by key from valid and invalid values."""
    raw = {}
    if draw(st.integers(0, 9)):  # mostly a valid name and preset, so the checks behind them run too
        raw["name"] = "prop" if draw(MOSTLY) else draw(NAMES)
    if draw(st.integers(0, 9)):
        raw["preset"] = draw(st.sampled_from(PRESET_NAMES)) if draw(MOSTLY) else draw(PRESETS)
    for key, strat in OPTIONAL.items():
        if draw(st.integers(0, 3)) == 0:
            raw[key] = draw(strat)
    kind = draw(st.sampled_from(["grid", "grid", "search", "search", "both", "neither"]))
    if kind in ("grid", "both"):
        raw["grid"] = draw(GRID)
    if kind in ("search", "both"):
        raw["search"] = draw(SEARCH)
    if draw(st.integers(0, 5)) == 0:  # an unknown or misspelt top-level key
        raw[draw(st.one_of(typos(SPEC_KEYS), st.text(max_size=8), st.integers()))] = draw(VALUES)
    return raw


@st.composite
def mutated_specs(draw) -> dict:
    """A valid spec with 0-3 mutations: a key set to a random value, a key removed, a misspelt key added."""
    raw = copy.deepcopy(draw(st.sampled_from([VALID_GRID, VALID_SEARCH])))
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.sampled_from(["top", "top", "drop", "typo", "row", "space", "search"]))
        if what == "top":
            key = draw(st.sampled_from(sorted(OPTIONAL) + ["name", "preset"]))
            raw[key] = draw({"name": NAMES, "preset": PRESETS, **OPTIONAL}[key])
        elif what == "drop" and raw:
            raw.pop(draw(st.sampled_from(sorted(raw))))
        elif what == "typo":
            raw[draw(typos(SPEC_KEYS))] = draw(VALUES)
        elif what == "row" and isinstance(raw.get("grid"), list) and raw["grid"]:
            raw["grid"][0] = {**raw["grid"][0], "set": draw(OVERRIDES)} if draw(st.booleans()) else draw(ROWS)
        elif what == "space" and isinstance(raw.get("search"), dict) and isinstance(raw["search"].get("space"), dict):
            raw["search"]["space"][draw(SPACE_KEYS)] = draw(DIST)
        elif what == "search" and isinstance(raw.get("search"), dict):
            key = draw(st.sampled_from(sorted(SEARCH_KEYS) + ["spcae"]))
            raw["search"][key] = draw(st.one_of(VALUES, st.integers(-1, 20)))
    return raw


@st.composite
def plausible_specs(draw) -> dict:
    """The valid specs with plausible seeds, overrides, rows and ranges: most validate, so the valid case is
    exercised as often as the refusals."""
    raw = copy.deepcopy(draw(st.sampled_from([VALID_GRID, VALID_SEARCH])))
    raw["seeds"] = draw(st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True))
    raw["overrides"] = dict(draw(st.lists(PLAUSIBLE, max_size=2)))
    if "grid" in raw:
        raw["grid"] = [{"row": f"r{i}", "set": dict(draw(st.lists(PLAUSIBLE, max_size=3)))}
                       for i in range(draw(st.integers(1, 3)))]
    else:
        lo = draw(st.floats(0.5, 3))
        hi = lo + draw(st.floats(0.25, 1))
        raw["search"]["space"]["method.tau"] = {"float": [lo, hi], "log": draw(st.booleans())}
        raw["search"]["space"]["method.K"] = {"choice": draw(st.lists(st.integers(1, 5), min_size=1, max_size=3,
                                                                      unique=True))}
        raw["search"]["confirm"]["seeds"] = [100 + s for s in raw["seeds"]]
    return raw


def specs() -> st.SearchStrategy[dict]:
    return st.one_of(mutated_specs(), noisy_specs())


# ---- properties ------------------------------------------------------------------------------------------
@SETTINGS
@given(raw=specs(), epochs=st.one_of(st.none(), st.none(), st.integers(1, 12)))
def test_random_specs_validate_or_fail_clearly(raw, epochs):
    try:
        spec = parse_spec(raw, epochs=epochs)
    except ConfigError as exc:  # SpecError subclasses ConfigError
        assert_clear(exc)
        event("refused")
    else:
        event("valid grid" if spec.grid else "valid search")
        assert isinstance(spec, Spec)
        assert bool(spec.grid) != bool(spec.search)
        check_valid_spec(spec, raw, epochs)


@settings(SETTINGS, max_examples=40)  # valid specs build every trial: slower per example
@given(raw=plausible_specs(), epochs=st.one_of(st.none(), st.integers(4, 12)))
def test_plausible_specs_carry_their_values_or_fail_clearly(raw, epochs):
    try:
        spec = parse_spec(raw, epochs=epochs)
    except ConfigError as exc:
        assert_clear(exc)
        event("refused")
    else:
        event("valid grid" if spec.grid else "valid search")
        check_valid_spec(spec, raw, epochs)


@SETTINGS
@given(name=st.sampled_from(PRESET_NAMES + [None]), nested=st.one_of(st.just({}), NESTED), overrides=OVERRIDES)
def test_random_overrides_validate_or_fail_clearly(name, nested, overrides):
    d = preset(name) if name else {}
    for section, values in nested.items():
        if isinstance(d.get(section), dict) and isinstance(values, dict):
            d[section].update(values)
        else:
            d[section] = values
    try:
        cfg = from_dict(d, overrides)
    except ConfigError as exc:
        assert_clear(exc)
    else:
        assert from_dict(cfg.to_dict()).to_dict() == cfg.to_dict()  # a valid config round-trips
        check_carries(cfg, overrides)


@SETTINGS
@given(key=st.one_of(st.sampled_from(DOTTED), typos(DOTTED)), value=VALUES)
def test_one_bad_override_names_its_key(key, value):
    """A single override on the default config: the message names that key (or, for a cross-field rule, the
    field it collides with, which itself names the overridden key's section)."""
    try:
        cfg = from_dict({}, {key: value})
    except ConfigError as exc:
        assert_clear(exc)
        msg = str(exc)
        assert repr(key) in msg or key in msg or key.split(".")[0] in msg, msg
        if key not in DOTTED:
            assert "unknown key" in msg, msg
    else:
        assert key in DOTTED
        check_carries(cfg, {key: value})


def test_spec_strategy_yields_valid_specs_too():
    """The generator is not all noise: some random specs do validate."""
    from hypothesis import find

    found = find(specs(), lambda raw: _valid(raw), settings=settings(max_examples=400, database=None, deadline=None))
    assert isinstance(parse_spec(found), Spec)


def _valid(raw) -> bool:
    try:
        parse_spec(raw)
        return True
    except ConfigError:
        return False
