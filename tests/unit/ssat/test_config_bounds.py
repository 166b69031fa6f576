"""Every bound the config checks, at its edge: the last allowed value builds a Config, the first refused one raises a
ConfigError that names the field (and, where the rule has one, the allowed values). One bound moved by one (`>=`
for `>`, 1 for 0) or a lost message is caught here, before any compute."""
import pytest

from ssat.config import ConfigError, from_dict
from ssat.presets import preset

BASE = "mnist5k-ssat-mbi"


def build(**over):
    return from_dict(preset(BASE), over)


@pytest.mark.parametrize("over", [
    {"method.rho_double_epoch": 1},
    {"method.K": 1},
    {"eval.autoattack_n": 1},
    {"system.cuda_memory_fraction": 1.0},
    {"data.n_labeled": 1},
    {"data.n_unlabeled": 0},
    {"teacher.lambda_u": 0.0},
    {"teacher.randaugment_magnitude": 0},
    {"teacher.randaugment_ops": 0},
    {"teacher.cutout": 1.0},
    {"model.dropout": 0.0},
    {"optim.swa_start": 0},
    {"optim.lr_milestones": [2, 3], "optim.lr_factors": [0.1, 0.1]},
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_the_edge_of_each_bound_is_allowed(over):
    cfg = build(**over)
    for key, value in over.items():
        section, field = key.split(".")
        assert getattr(getattr(cfg, section), field) == value


@pytest.mark.parametrize("over, match", [
    ({"method.rho_double_epoch": 0}, r"method\.rho_double_epoch: 0 "),
    ({"method.rho0": 1.0}, r"method\.rho0: 1\.0 is out of range; allowed: 0 < rho0 < 1 \(and 2\*rho0 < 1 when "
                           r"rho_double_epoch is set\)"),
    ({"method.rho_double_epoch": 5, "method.rho0": 0.6}, r"method\.rho0: 0\.6 doubled is 1\.2; allowed: 2\*rho0 < 1"),
    ({"method.K": 0}, r"method\.K: 0; allowed: K >= 1"),
    ({"eval.autoattack_n": 0}, r"eval\.autoattack_n: 0; allowed: >= 1"),
    ({"system.cuda_memory_fraction": 1.5}, r"system\.cuda_memory_fraction"),
    ({"system.compile": "fast"}, r"^system\.compile: 'fast' is not allowed"),
    ({"eval.select_by": "pgd20"}, r"^eval\.select_by: 'pgd20' is not allowed \(did you mean 'pgd10'\?\); "
                                  r"allowed: pgd10, clean$"),
    ({"data.n_labeled": 0}, r"data\.n_labeled: 0; allowed: >= 1"),
    ({"data.n_unlabeled": -1}, r"data\.n_unlabeled: -1; allowed: >= 0 or None"),
    ({"attack.eps": 0.0}, r"attack\.eps: 0\.0; allowed: eps > 0"),
    ({"optim.swa_start": 10}, r"optim\.swa_start: 10; allowed: 0\.\.9 or None"),  # the preset: 10 epochs
    ({"optim.lr_milestones": [2, 2], "optim.lr_factors": [0.1, 0.1]}, r"optim\.lr_milestones"),
    ({"model.dropout": 1.0}, r"model\.dropout: 1\.0; allowed: \[0, 1\)"),
    ({"teacher.threshold": 0.0}, r"teacher\.threshold: 0\.0; allowed: 0 < threshold < 1"),
    ({"teacher.lambda_u": -1.0}, r"teacher\.lambda_u: -1\.0; allowed: >= 0"),
    ({"teacher.cutout": 1.5}, r"teacher\.cutout: 1\.5; allowed: 0\.\.1"),
    ({"teacher.randaugment_magnitude": -1}, r"teacher\.randaugment_magnitude: -1; allowed: 0\.\.30"),
    ({"teacher.randaugment_ops": -1}, r"teacher\.randaugment_ops: -1; allowed: >= 0"),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) if isinstance(o, dict) else "")
def test_the_first_value_past_each_bound_is_refused_by_name(over, match):
    with pytest.raises(ConfigError, match=match):
        build(**over)


def test_fp16_on_a_cpu_is_refused_with_what_to_use_instead():
    with pytest.raises(ConfigError, match=r"^system\.precision: 'fp16' with system\.device='cpu'; fp16 is float16 "
                                          r"autocast with a gradient scaler, for CUDA; on a CPU use fp32 \(or auto\)$"):
        build(**{"system.precision": "fp16", "system.device": "cpu"})


def test_a_list_given_as_text_is_parsed_with_or_without_brackets():
    for text in ("[2, 3]", "2,3", "[2,3,]"):
        assert build(**{"optim.lr_milestones": text, "optim.lr_factors": [0.1, 0.1]}).optim.lr_milestones == [2, 3]


@pytest.mark.parametrize("text,want", [("true", True), ("Yes", True), ("on", True), ("false", False), ("no", False),
                                       ("OFF", False)])
def test_booleans_from_the_command_line_or_a_spec(text, want):
    """--set method.interpolate=on: the six spellings a user types, in any case."""
    assert build(**{"method.interpolate": text}).method.interpolate is want


def test_a_bad_seed_names_the_field():
    with pytest.raises(ConfigError, match=r"^seed: "):
        from_dict(preset(BASE), {"seed": "abc"})


def test_the_registered_names_are_read_when_asked():
    """ssat.config.METHODS / SCHEDULES follow the registries (a schedule or method registered later is listed)."""
    import ssat.config as config
    from ssat.methods import method_names
    from ssat.schedules import schedule_names
    assert config.SCHEDULES == schedule_names() and "curious" in config.SCHEDULES
    assert config.METHODS == method_names() and "ssat-mbi" in config.METHODS
    with pytest.raises(AttributeError, match="no attribute 'SCHEDULE'"):
        config.SCHEDULE


@pytest.mark.parametrize("field,value", [("system.device", "tpu"), ("system.graph_mode", "sometimes"),
                                         ("system.fold_bn", "maybe")])
def test_a_refused_system_switch_names_its_field(field, value):
    with pytest.raises(ConfigError) as err:
        build(**{field: value})
    assert str(err.value).startswith(f"{field}: ")


def test_kl_attack_with_a_hard_inner_target_is_refused_word_for_word():
    with pytest.raises(ConfigError) as err:
        from_dict(preset("mnist5k-ssat-mbi-awr"), {"attack.inner_loss": "kl", "attack.inner_target": "hard"})
    assert str(err.value) == ("attack.inner_target: 'hard' with attack.inner_loss='kl', whose attack has no target "
                              "(KL to the clean prediction); allowed with kl: 'soft'")


def test_set_values_parse_as_yaml_and_an_empty_one_stays_empty():
    from ssat.config import parse_overrides

    assert parse_overrides(["a.b=", "c.d= ", "e.f=[1, 2]", "g.h=null"]) == {"a.b": "", "c.d": "", "e.f": [1, 2],
                                                                           "g.h": None}
    with pytest.raises(ConfigError) as err:
        parse_overrides(["a.b=[1, 2"])
    assert str(err.value).startswith("--set 'a.b=[1, 2': the value '[1, 2' is not a valid YAML scalar or list (")
