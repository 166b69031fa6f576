"""Check the cluster configs of ssat-sweeps offline: Ray's own schema, then the project's rules.

    python -m clusters.cluster_check                  # every cluster file of the repository
    python -m clusters.cluster_check FILE...          # .yaml cluster configs, .sbatch / .sh scripts
    (python -m clusters.cluster_check is the same command)

Cluster YAMLs go through the autoscaler's ``prepare_config`` and ``validate_config`` (a private Ray API:
it is checked against the Ray that lock/requirements.lock pins), then the project's rules:

- paths exist: file_mounts sources, and every repository file a command names through a mount; mounts are
  folders (Ray warns that a single mounted file may not update: its Docker check runs on every config)
- versions pinned: every ``pip install`` uses the lock file (``-c``/``-r`` a ``*lock*`` file) or ``==`` pins;
  no ``:latest`` images; AWS nodes name an image (Ray's default DLAMI has a driver too old for CUDA 13)
- node resources are integers (``ray start --num-gpus/--resources`` too); worker types start at 0
- ``RAY_AUTH_MODE`` set explicitly (disabled|token), to one value, before every ``ray start``/``ray stop``
- the head starts an MLflow server, never bound to 0.0.0.0 without ``--allowed-hosts`` (nor to ``*``);
  the dashboard (job API) is not bound to 0.0.0.0
- every node gets the same storage path, on a cloud below an NFS mount every node makes (or object
  storage); a data root is checked
- the MLflow store of a cloud head is not a SQLite file below an NFS mount (SQLite's locking is unreliable on
  network file systems); clusters/postgres.sh keeps PostgreSQL's data off NFS and, on a cloud, its dump on it

Scripts get ``bash -n``, ``shellcheck`` when installed, and the pin / MLflow / auth rules. No torch here.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import yaml

LOCK = Path("lock") / "requirements.lock"  # relative to the repository: what every node installs
AUTH_MODES = ("disabled", "token")
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "*")
OBJECT_STORE_SCHEMES = ("s3://", "gs://", "abfs://", "abfss://", "az://")
COMMAND_KEYS = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands")
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "\n"}
RAY_CALL = re.compile(r"\bray\s+(start|stop)\b")
AUTH_SET = re.compile(r"\bRAY_AUTH_MODE=([^\s;&|]*)")


def repo_root_of(path: Path) -> Path:
    """The nearest folder above path holding pyproject.toml (the repository root), else path's folder."""
    for folder in [path.parent, *path.parent.parents]:
        if (folder / "pyproject.toml").is_file():
            return folder
    return path.parent


def tokens_of(command: str) -> list[str]:
    """Shell words of one command line, with ; && || | & ( ) as separate tokens (comments dropped)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes (e.g. a heredoc line): plain words are enough for the rules
        return command.split()


def flag_values(tokens: list[str], *names: str) -> list[str]:
    """Values of --flag VALUE and --flag=VALUE for any of names."""
    values = []
    for i, tok in enumerate(tokens):
        for name in names:
            if tok == name and i + 1 < len(tokens) and tokens[i + 1] not in SEPARATORS:
                values.append(tokens[i + 1])
            elif tok.startswith(name + "="):
                values.append(tok[len(name) + 1:])
    return values


def segments(tokens: list[str]) -> Iterable[list[str]]:
    """Simple commands of a token list (split at ; && || | & and parentheses)."""
    current: list[str] = []
    for tok in tokens:
        if tok in SEPARATORS:
            if current:
                yield current
            current = []
        else:
            current.append(tok)
    if current:
        yield current


def logical_lines(text: str) -> list[str]:
    """Lines of a shell script with backslash continuations joined."""
    return re.sub(r"\\\n", " ", text).splitlines()


def lock_names(lock: Path) -> set[str]:
    """Normalised package names pinned in a lock file."""
    if not lock.is_file():
        return set()
    names = set()
    for line in lock.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            names.add(re.sub(r"[-_.]+", "-", line.split("==")[0].split("[")[0]).lower())
    return names


# --- rules over shell words (YAML commands and script lines alike) -------------------------------------------

def pip_problems(tokens: list[str], where: str, locked: set[str]) -> list[str]:
    """Unpinned `pip install` calls: every requirement pinned with == or covered by a lock file."""
    problems = []
    for seg in segments(tokens):
        for i, tok in enumerate(seg[:-1]):
            if seg[i + 1] != "install" or not (tok in ("pip", "pip3") or tok.endswith("/pip")):
                continue
            args = seg[i + 2:]
            files = flag_values(args, "-c", "--constraint", "-r", "--requirement")
            has_lock = any("lock" in f.lower() for f in files)
            skip = {j + 1 for j, a in enumerate(args) if a in ("-c", "--constraint", "-r", "--requirement",
                                                                "-i", "--index-url", "--extra-index-url",
                                                                "-f", "--find-links", "-t", "--target")}
            specs = [a for j, a in enumerate(args) if j not in skip and not a.startswith("-")]
            specs += flag_values(args, "-e", "--editable")
            for spec in specs:
                name = re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~;@ ]", spec)[0]).lower()
                path_like = spec.startswith((".", "/", "~", "$")) or "/" in spec
                if "==" in spec or (has_lock and (path_like or name in locked)):
                    continue
                problems.append(f"{where}: `pip install ... {spec}` is not pinned (use -c lock/requirements.lock "
                                f"or ==; a project install without the lock takes whatever is newest)")
            for f in files:
                if not has_lock:
                    problems.append(f"{where}: pip requirement file {f} is not a lock file")
    return problems


def mlflow_problems(tokens: list[str], where: str) -> list[str]:
    """An MLflow server on every interface must say which Host headers it accepts (DNS rebinding)."""
    problems = []
    for seg in segments(tokens):
        is_server = any(t == "mlflow" and j + 1 < len(seg) and seg[j + 1] == "server" for j, t in enumerate(seg))
        is_script = any(t.endswith("start_mlflow.sh") for t in seg) and "--stop" not in seg
        if not (is_server or is_script):
            continue
        hosts = flag_values(seg, "--host", "-h")
        allowed = flag_values(seg, "--allowed-hosts")
        if any(h in WILDCARD_HOSTS for h in hosts):
            if is_script:
                problems.append(f"{where}: start_mlflow.sh --host {hosts[0]}: bind the private address")
            elif not allowed:
                problems.append(f"{where}: `mlflow server --host {hosts[0]}` without --allowed-hosts")
        if any("*" == a.strip() or a.strip().startswith("*,") for a in allowed):
            problems.append(f"{where}: mlflow --allowed-hosts '*' accepts any Host header")
    return problems


def dashboard_problems(tokens: list[str], where: str) -> list[str]:
    return [f"{where}: dashboard bound to {h}: the job API runs code; bind 127.0.0.1 and use an SSH tunnel"
            for h in flag_values(tokens, "--dashboard-host") if h in WILDCARD_HOSTS]


def resource_problems(tokens: list[str], where: str) -> list[str]:
    """`ray start` node resources must be integers (fractions belong to the trials' requests)."""
    problems = []
    for value in flag_values(tokens, "--num-cpus", "--num-gpus"):
        if not value.startswith("$") and not re.fullmatch(r"\d+", value):
            problems.append(f"{where}: node resource {value!r} is not an integer")
    for value in flag_values(tokens, "--resources"):
        if value.startswith("$"):
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            problems.append(f"{where}: --resources {value!r} is not JSON")
            continue
        problems += [f"{where}: custom node resource {k}={v!r} is not an integer"
                     for k, v in parsed.items() if not isinstance(v, int) or isinstance(v, bool)]
    return problems


def word_rules(command: str, where: str, locked: set[str]) -> list[str]:
    tokens = tokens_of(command)
    return (pip_problems(tokens, where, locked) + mlflow_problems(tokens, where)
            + dashboard_problems(tokens, where) + resource_problems(tokens, where))


# --- cluster YAMLs ----------------------------------------------------------------------------------------------

def ray_schema_problems(config: dict) -> tuple[list[str], dict | None]:
    """Ray's own validation (prepare_config fills defaults and node types; validate_config = JSON schema)."""
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    quiet = [logging.getLogger(n) for n in ("ray.autoscaler._private.util", "ray.autoscaler")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.WARNING)
    chatter = io.StringIO()  # Ray's cli_logger prints (e.g. a docker-only note on single-file mounts)
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            prepared = prepare_config(copy.deepcopy(config))
            validate_config(prepared)
        return [], prepared
    except jsonschema.ValidationError as err:
        at = "/".join(str(p) for p in err.absolute_path) or "(top)"
        return [f"ray schema: {at}: {err.message}"], None
    except (Exception, SystemExit) as err:  # cli_logger.abort raises click exceptions / SystemExit
        said = " ".join(chatter.getvalue().split())[-300:]
        return [f"ray schema: {type(err).__name__}: {err} {said}".rstrip()], None
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)


def ray_version_problems(root: Path) -> list[str]:
    """The private validation API is only trusted for the Ray version the lock pins."""
    import ray

    lock = root / LOCK
    pins = [ln.strip() for ln in lock.read_text().splitlines() if ln.strip().startswith("ray==")] \
        if lock.is_file() else []
    if not pins:
        return [f"{lock}: no ray==VERSION pin (the cluster launcher and this check need one Ray version)"]
    pinned = pins[0].split("==")[1]
    if pinned != ray.__version__:
        return [f"validated with ray {ray.__version__} but lock/requirements.lock pins ray {pinned}: "
                "prepare_config/validate_config are private and may differ"]
    return []


def mounted_file(word: str, mounts: dict[str, str], root: Path) -> Path | None:
    """The local file behind a remote path under a file_mounts target (~/ssat-sweeps/x -> ./x)."""
    for remote, local in mounts.items():
        prefix = remote.rstrip("/") + "/"
        if word.startswith(prefix):
            return (root / local / word[len(prefix):]).resolve()
    return None


def referenced_files(commands: list[str], mounts: dict[str, str], root: Path) -> list[tuple[str, Path]]:
    refs = []
    for command in commands:
        for tok in tokens_of(command):
            local = mounted_file(tok, mounts, root)
            if local is not None and "." in local.name:
                refs.append((tok, local))
    return refs


def script_closure(scripts: Iterable[Path]) -> list[Path]:
    """The scripts named plus the sibling scripts they call through $here/NAME or "$repo/clusters/NAME"."""
    seen: list[Path] = []
    todo = [s for s in scripts if s.suffix in (".sh", ".sbatch") and s.is_file()]
    while todo:
        script = todo.pop()
        if script in seen:
            continue
        seen.append(script)
        for name in re.findall(r"\$\{?here\}?/([\w./-]+\.sh)", script.read_text()):
            todo.append((script.parent / name).resolve())
    return seen


def auth_problems(cfg: dict) -> tuple[list[str], set[str]]:
    problems, modes = [], set()
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        for command in cfg.get(key) or []:
            call = RAY_CALL.search(command)
            if not call:
                continue
            found = AUTH_SET.findall(command[:call.start()])
            if not found:
                problems.append(f"{key}: `{command.strip()[:70]}` runs Ray without RAY_AUTH_MODE set before it")
            for mode in found:
                modes.add(mode)
                if mode not in AUTH_MODES:
                    problems.append(f"{key}: RAY_AUTH_MODE={mode!r} (must be disabled or token)")
    return problems, modes


def token_file_problems(commands: list[str], modes: set[str]) -> list[str]:
    """With token auth, every node's setup names the same token file (the shared secret): a node with another
    token, or none, cannot join the cluster."""
    setups = [c for c in commands if "setup_node.sh" in c]
    if modes != {"token"} or not setups:
        return []
    files = [flag_values(tokens_of(c), "--auth-token-file") for c in setups]
    if any(not f for f in files) or len({v for f in files for v in f}) != 1:
        return ["RAY_AUTH_MODE=token: every setup_node.sh needs the same --auth-token-file (on the shared storage), "
                f"got {[f[0] if f else None for f in files]}"]
    return []


def node_type_problems(cfg: dict) -> list[str]:
    problems = []
    head = cfg.get("head_node_type")
    node_types = cfg.get("available_node_types") or {}
    for name, node in node_types.items():
        resources = node.get("resources") or {}
        if "CPU" not in resources or "GPU" not in resources:
            problems.append(f"node type {name}: declare CPU and GPU explicitly (integers)")
        if name != head:
            if node.get("min_workers", 0) != 0:
                problems.append(f"node type {name}: min_workers must be 0 (no GPU paid for while idle)")
            if "max_workers" not in node:
                problems.append(f"node type {name}: set max_workers (a sensible maximum)")
        image = str((node.get("node_config") or {}).get("ImageId", ""))
        if cfg.get("provider", {}).get("type") == "aws" and image.lower() in ("", "latest_dlami"):
            problems.append(f"node type {name}: set ImageId (Ray's default DLAMI has an NVIDIA driver too old "
                            "for torch's CUDA 13.0 build, which needs >= 580.65.06)")
    if not any((n.get("resources") or {}).get("GPU", 0) >= 1 for n in node_types.values()):
        problems.append("no node type offers a GPU")
    return problems


def storage_problems(commands: list[str], provider: str) -> list[str]:
    values = {v for c in commands for v in flag_values(tokens_of(c), "--storage-path")}
    if not values:
        return ["no --storage-path given to the nodes (setup_node.sh): Tune's storage_path must be set"]
    problems = []
    if len(values) > 1:
        problems.append(f"nodes get different storage paths {sorted(values)}: every node must see the same one")
    if provider != "local":
        shared = [m.rstrip("/") + "/" for c in commands for m in flag_values(tokens_of(c), "--nfs-mount")]
        problems += [f"storage path {v} is node-local: Ray no longer syncs trial folders to the head; use a "
                     "folder below an NFS mount every node gets (--nfs/--nfs-mount) or object storage"
                     for v in values if not v.startswith(OBJECT_STORE_SCHEMES)
                     and not any(v.startswith(m) for m in shared)]
    return problems


def store_problems(commands: list[str], provider: str) -> list[str]:
    """Where the head's MLflow store lives: no SQLite on NFS (a cloud's shared storage); PostgreSQL's data folder on
    the node's own disk; on a cloud, its dump on the shared storage (a replaced head restores from it)."""
    mounts = [m.rstrip("/") + "/" for c in commands for m in flag_values(tokens_of(c), "--nfs-mount")]
    on_nfs = lambda path: any(path.rstrip("/") + "/" == m or path.startswith(m) for m in mounts)  # noqa: E731
    problems = []
    for command in commands:
        for seg in segments(tokens_of(command)):
            if any(t.endswith("start_mlflow.sh") for t in seg) or any(
                    t == "mlflow" and j + 1 < len(seg) and seg[j + 1] == "server" for j, t in enumerate(seg)):
                for uri in flag_values(seg, "--backend-store-uri"):
                    if uri.startswith("sqlite:///") and on_nfs(uri[len("sqlite:///"):]):
                        problems.append(f"MLflow store {uri} is a SQLite file on NFS: SQLite's file locking is "
                                        "unreliable there; use the head's PostgreSQL (clusters/postgres.sh)")
            if any(t.endswith("postgres.sh") for t in seg) and "start" in seg:
                for data in flag_values(seg, "--data-dir"):
                    if on_nfs(data):
                        problems.append(f"postgres.sh --data-dir {data} is on NFS: keep PostgreSQL's data on the "
                                        "node's own disk (its dump goes to the shared storage)")
                dumps = flag_values(seg, "--dump")
                if not dumps:
                    problems.append("postgres.sh start without --dump: a replaced head would find no runs")
                elif provider != "local" and not all(on_nfs(d) for d in dumps):
                    problems.append(f"postgres.sh --dump {dumps[0]} is node-local: a replaced head would not find "
                                    "it; put it below the NFS mount")
    return problems


def validate_cluster_yaml(path: str | Path, repo_root: str | Path | None = None) -> list[str]:
    """Problems of one cluster-launcher YAML (empty when it passes Ray's schema and the project's rules).

    Relative file_mounts sources resolve against repo_root (default: the repository holding path), the
    folder `ray up` is run from.
    """
    path = Path(path)
    root = Path(repo_root) if repo_root else repo_root_of(path.resolve())
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        return [f"cannot read: {err}"]
    if not isinstance(config, dict):
        return ["not a YAML mapping"]
    problems, prepared = ray_schema_problems(config)
    problems += ray_version_problems(root)
    cfg = prepared or config
    provider = (config.get("provider") or {}).get("type", "")
    commands = [c for key in COMMAND_KEYS for c in (cfg.get(key) or []) if isinstance(c, str)]
    locked = lock_names(root / LOCK)

    mounts = {str(k): str(v) for k, v in (config.get("file_mounts") or {}).items()}
    for remote, local in mounts.items():
        if not (root / local).exists():
            problems.append(f"file_mounts {remote}: source {local} does not exist (relative to {root})")
        elif (root / local).is_file():
            problems.append(f"file_mounts {remote}: source {local} is a file; mount its folder (Ray warns that a "
                            "mounted file may not update)")
    refs = referenced_files(commands, mounts, root)
    problems += [f"a command names {word}, but {local} does not exist" for word, local in refs if not local.exists()]
    for script in script_closure(local for _, local in refs):
        problems += script_rule_problems(script, locked)

    for command in commands:
        problems += word_rules(command, f"command `{command.strip()[:60]}`", locked)
    auth, modes = auth_problems(cfg)
    problems += auth
    modes |= {v for c in commands for v in flag_values(tokens_of(c), "--auth-mode")}
    if len(modes) > 1:
        problems.append(f"different RAY_AUTH_MODE values across commands: {sorted(modes)}")
    problems += token_file_problems(commands, modes)
    head_cmds = (cfg.get("head_setup_commands") or []) + (cfg.get("head_start_ray_commands") or [])
    if not any(re.search(r"mlflow\s+server|start_mlflow\.sh", c) and "--stop" not in c for c in head_cmds):
        problems.append("the head starts no MLflow tracking server (clusters/start_mlflow.sh)")
    problems += storage_problems(commands, provider)
    problems += store_problems(commands, provider)
    if not any(flag_values(tokens_of(c), "--data-root") for c in commands):
        problems.append("no --data-root checked on the nodes (setup_node.sh --data-root)")
    docker = config.get("docker") or {}
    for key in ("image", "head_image", "worker_image"):
        image = str(docker.get(key, ""))
        if image and ("@sha256:" not in image) and (":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")):
            problems.append(f"docker.{key} {image} is not pinned to a tag or digest")
    if provider != "local":
        problems += node_type_problems(config)
    return problems


# --- scripts ----------------------------------------------------------------------------------------------------

def script_rule_problems(path: Path, locked: set[str]) -> list[str]:
    """The pin, MLflow, dashboard and resource rules over every logical line of a shell script."""
    problems = []
    for n, line in enumerate(logical_lines(path.read_text()), start=1):
        if line.lstrip().startswith("#"):
            continue
        problems += word_rules(line, f"{path.name}:{n}", locked)
    return problems


def validate_script(path: str | Path, repo_root: str | Path | None = None) -> list[str]:
    """Problems of a shell script or sbatch template: syntax, shellcheck (if installed), project rules."""
    path = Path(path)
    root = Path(repo_root) if repo_root else repo_root_of(path.resolve())
    if not path.is_file():
        return [f"{path} does not exist"]
    problems = []
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    if syntax.returncode:
        problems.append(f"bash -n: {syntax.stderr.strip()}")
    if shutil.which("shellcheck") and not syntax.returncode:
        lint = subprocess.run(["shellcheck", "-x", "-S", "warning", "-s", "bash", "-f", "gcc",
                               str(path.resolve())], capture_output=True, text=True, cwd=root)
        problems += [f"shellcheck: {line}" for line in lint.stdout.splitlines() if line.strip()]
    text = path.read_text()
    problems += script_rule_problems(path, lock_names(root / LOCK))
    if path.suffix == ".sbatch":
        if "#SBATCH" not in text:
            problems.append("no #SBATCH directives")
        modes = re.findall(r"^\s*export\s+RAY_AUTH_MODE=(\S+)", text, flags=re.M)
        if not modes:
            problems.append("RAY_AUTH_MODE is not exported explicitly (export RAY_AUTH_MODE=disabled|token)")
        problems += [f"RAY_AUTH_MODE={m!r} (must be disabled or token)" for m in modes if m not in AUTH_MODES]
        if not re.search(r"^\s*export\s+SSAT_STORAGE_PATH=", text, flags=re.M):
            problems.append("SSAT_STORAGE_PATH (Tune's storage_path on the shared file system) is not exported")
        for rel in sorted(set(re.findall(r"\bclusters/[\w./-]+\.(?:sh|py|lock)\b", text))):
            if not (root / rel).is_file():
                problems.append(f"names {rel}, which does not exist")
    return problems


def validate_path(path: str | Path, repo_root: str | Path | None = None) -> list[str]:
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        return validate_cluster_yaml(path, repo_root)
    if path.suffix in (".sbatch", ".sh"):
        return validate_script(path, repo_root)
    return [f"unknown kind of file {path} (expected .yaml, .sbatch or .sh)"]


def default_targets(root: Path) -> list[Path]:
    """Every cluster file of the repository: ray_cluster.yaml, clusters/**/*.yaml|.sbatch|.sh."""
    clusters = root / "clusters"
    found = [root / "ray_cluster.yaml"]
    for pattern in ("*.yaml", "*.yml", "*.sbatch", "*.sh"):
        found += sorted(clusters.rglob(pattern))
    return [p for p in found if p.is_file()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusters.cluster_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="default: every cluster file of the repository")
    args = parser.parse_args(argv)
    files = args.files or default_targets(repo_root_of(Path(__file__).resolve()))
    failed = 0
    for path in files:
        problems = validate_path(path)
        failed += bool(problems)
        print(f"{'FAIL' if problems else 'ok  '} {path}")
        for problem in problems:
            print(f"     - {problem}")
    if not shutil.which("shellcheck"):
        print("note: shellcheck is not installed; scripts were only checked with bash -n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
