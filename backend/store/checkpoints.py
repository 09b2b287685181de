"""Which checkpoint sampled each training step of a run, and which model a model job uses for a rollout.

A run's steps are sampled by successive checkpoints. `creditlens import --model` takes one folder (the
run's model: its tokenizer, sampling checkpoint unknown), a template with `{step}` (`ckpts/step_{step}`)
or a mapping file (JSON or TOML, step -> folder); a native step file may name its own (`meta.checkpoint`,
relative to the file's folder: `backend.ingest.recorded_checkpoints`); `creditlens checkpoints` lists and
attaches them later. Folders are stored absolute. The model jobs (teacher, resample, score, model-credit,
the Resample view) call `choose_model` per rollout: the step's checkpoint when it is known (on-policy); a
model named on purpose (`--model DIR`) otherwise, marked off-policy unless it is that checkpoint; a run
that records no checkpoint at all keeps its one model, with `on_policy` unknown (None). A run that records
checkpoints for some steps but not for this rollout's refuses to guess.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from backend.core.errors import InputError
from backend.store.checkpoint_queries import run_steps, set_step_checkpoints, step_checkpoints

STEP_FIELD = re.compile(r"\{step(:[^{}]*)?\}")


def absolute(folder: str | Path) -> str:
    return str(Path(folder).expanduser().resolve())


def is_template(text: str) -> bool:
    return STEP_FIELD.search(str(text)) is not None


def template_folder(template: str, step: int) -> str:
    """The folder of `step` under a `{step}` template (format specs such as `{step:05d}` work)."""
    try:
        return str(template).format(step=int(step))
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"--model {template!r}: a template may hold only {{step}} fields ({exc})") from None


def template_steps(template: str) -> dict[int, str]:
    """step -> absolute folder of every existing folder that matches the template."""
    text = str(Path(template).expanduser())
    pattern = re.compile(
        "".join(
            r"(\d+)" if STEP_FIELD.fullmatch(part) else re.escape(part)
            for part in re.split(r"(\{step(?::[^{}]*)?\})", text)
            if part
        )
        + "$"
    )
    glob = STEP_FIELD.sub("*", text)
    root = Path("/") if Path(glob).is_absolute() else Path(".")
    relative = glob.lstrip("/") if Path(glob).is_absolute() else glob
    found = {}
    for path in root.glob(relative):
        match = pattern.search(str(path) if Path(glob).is_absolute() else str(path))
        if match and path.is_dir():
            found[int(match.group(1))] = absolute(path)
    return dict(sorted(found.items()))


def read_mapping(path: str | Path) -> dict[int, str]:
    """step -> absolute folder from a JSON or TOML file: `{"0": "ckpts/a", ...}` (or the same under a
    `checkpoints` key / `[checkpoints]` table). Relative folders are relative to the file."""
    path = Path(path)
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path}: not a readable JSON or TOML mapping of step -> folder ({str(exc).splitlines()[0]})"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("checkpoints"), dict):
        data = data["checkpoints"]
    if not isinstance(data, dict) or not data:
        raise InputError(f'{path}: expected a mapping of step -> folder, e.g. {{"0": "ckpts/step_0"}}')
    out = {}
    for key, folder in data.items():
        try:
            step = int(key)
        except (TypeError, ValueError):
            raise InputError(f"{path}: key {key!r}: a step must be an integer") from None
        if not isinstance(folder, str) or not folder:
            raise InputError(f"{path}: step {step}: expected a folder path, got {folder!r}")
        out[step] = absolute(path.parent / Path(folder).expanduser())
    return dict(sorted(out.items()))


def parse_assignments(pairs: list[str]) -> dict[int, str]:
    """`STEP=DIR` pairs (`creditlens checkpoints --set`) -> step -> absolute folder."""
    out = {}
    for pair in pairs:
        step, sep, folder = pair.partition("=")
        try:
            if not sep or not folder.strip():
                raise ValueError
            out[int(step)] = absolute(folder.strip())
        except ValueError:
            raise InputError(f"--set {pair!r}: expected STEP=DIR, e.g. --set 3=ckpts/step_3") from None
    return out


def check_folders(folders: dict[int, str], where: str) -> None:
    missing = [f"step {s}: {f}" for s, f in folders.items() if not Path(f).is_dir()]
    if missing:
        raise InputError(f"{where}: no such model folder(s): {'; '.join(missing)}")


@dataclass(frozen=True)
class ModelSpec:
    """What `import --model` named: the folder whose tokenizer cuts the run, and the step checkpoints."""

    tokenizer_dir: str | None
    checkpoints: dict[int, str]
    template: str | None = None


def parse_model_spec(text: str | None) -> ModelSpec:
    """A folder, a `{step}` template or a mapping file (.json/.toml) -> `ModelSpec`. All checkpoints of a
    run share one tokenizer: the lowest step's folder gives it."""
    if not text:
        return ModelSpec(None, {})
    text = str(text)
    if is_template(text):
        found = template_steps(text)
        if not found:
            raise InputError(
                f"--model {text!r}: no folder matches the template (e.g. {template_folder(text, 0)})"
            )
        return ModelSpec(found[min(found)], found, template=text)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix in (".json", ".toml"):
        folders = read_mapping(path)
        check_folders(folders, str(path))
        return ModelSpec(folders[min(folders)], folders)
    return ModelSpec(absolute(path), {})


def folders_for_steps(spec: ModelSpec, steps) -> dict[int, str]:
    """The spec's checkpoints of these steps (a template is read for every step, existing folders only)."""
    if spec.template is not None:
        candidates = {int(s): absolute(template_folder(spec.template, s)) for s in steps}
        return {s: f for s, f in candidates.items() if Path(f).is_dir()}
    return {s: f for s, f in spec.checkpoints.items() if s in set(int(x) for x in steps)}


@dataclass(frozen=True)
class ModelChoice:
    """The model a job uses for a rollout's step, and whether it is the policy that sampled it."""

    model_dir: str
    step: int
    on_policy: bool | None
    """True: the step's checkpoint; False: another model; None: the run records no checkpoint at all."""
    why: str

    def to_json(self) -> dict:
        return {"model": self.model_dir, "on_policy": self.on_policy, "why": self.why}

    @property
    def label(self) -> str:
        return {True: "on-policy", False: "off-policy", None: "sampling policy unknown"}[self.on_policy]


def choose_model(
    checkpoints: dict[int, str], run_model: str | None, step: int, named: str | None, run: str
) -> ModelChoice:
    """The model for a rollout of step `step` (see the module docstring); errors say what fixes them."""
    step = int(step)
    known = checkpoints.get(step)
    if named:
        folder = absolute(named)
        if known is not None and Path(known) == Path(folder):
            return ModelChoice(folder, step, True, f"step {step}'s checkpoint {folder}")
        sampled = f"step {step} was sampled by {known}" if known else f"step {step}'s checkpoint is unknown"
        return ModelChoice(folder, step, False, f"{folder} named with --model, off-policy ({sampled})")
    if known is not None:
        return ModelChoice(known, step, True, f"step {step}'s checkpoint {known}")
    if checkpoints:
        raise InputError(
            f"run {run!r}: the checkpoint that sampled step {step} is unknown (the run records steps "
            f"{', '.join(map(str, sorted(checkpoints)))}); attach it with `creditlens checkpoints --run "
            f"{run} --set {step}=DIR`, or pass --model DIR to use another model on purpose (marked "
            "off-policy)"
        )
    if not run_model:
        raise InputError(
            f"run {run!r} has no model recorded; pass --model DIR (a local Hugging Face "
            f"folder), or attach its step checkpoints with `creditlens checkpoints --run {run}`"
        )
    return ModelChoice(
        run_model,
        step,
        None,
        f"the run's model {run_model}, with no step checkpoints recorded (attach them with "
        "`creditlens checkpoints`)",
    )  # the label says the sampling policy is unknown


def choices_for(store, run: str, steps, named: str | None) -> dict[int, ModelChoice]:
    """`choose_model` for every step in `steps` of `run` (store: an open `Store`)."""
    checkpoints = step_checkpoints(store, run)
    run_model = store.run_info(run).get("model_dir")
    return {int(s): choose_model(checkpoints, run_model, int(s), named, run) for s in sorted(set(steps))}


def attach_from_spec(store, run: str, spec: ModelSpec) -> str | None:
    """Record the spec's checkpoints of the steps `run` holds (after an import); returns a note for the
    import summary, or None when the spec names no checkpoints."""
    if spec.template is None and not spec.checkpoints:
        return None
    steps = run_steps(store, run)
    folders = folders_for_steps(spec, steps)
    if folders:
        set_step_checkpoints(store, run, folders)
    missing = sorted(set(steps) - set(step_checkpoints(store, run)))
    note = f"step checkpoints: {len(folders)} of {len(steps)} steps attached"
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        note += (
            f"; no checkpoint for step(s) {shown} (attach later with `creditlens checkpoints --run "
            f"{run} --set STEP=DIR`)"
        )
    return note


def checkpoint_table(store, run: str) -> list[dict]:
    """Per step of `run`: step, rollouts, checkpoint (absolute folder or None), exists (the folder is on this
    machine). What `creditlens checkpoints` prints."""
    known = step_checkpoints(store, run)
    return [
        {
            "step": step,
            "rollouts": n,
            "checkpoint": known.get(step),
            "exists": known.get(step) is not None and Path(known[step]).is_dir(),
        }
        for step, n in run_steps(store, run).items()
    ]


def attach(
    store,
    run: str,
    *,
    assignments: list[str] | None = None,
    template: str | None = None,
    mapping_file: str | None = None,
) -> dict[int, str]:
    """Attach checkpoints to `run` from `STEP=DIR` pairs, a `{step}` template (every step of the run with an
    existing folder) or a mapping file; folders must exist. Returns what was attached (step -> folder)."""
    folders: dict[int, str] = {}
    steps = run_steps(store, run)
    if template:
        if not is_template(template):
            raise InputError(f"--template {template!r}: expected a folder path with {{step}} in it")
        folders.update(folders_for_steps(ModelSpec(None, {}, template=template), steps))
        if not folders:
            raise InputError(
                f"--template {template!r}: no folder for any step of run {run!r} "
                f"(e.g. {template_folder(template, min(steps, default=0))})"
            )
    if mapping_file:
        folders.update(read_mapping(mapping_file))
    folders.update(parse_assignments(assignments or []))
    check_folders(folders, f"run {run!r}")
    unknown = sorted(set(folders) - set(steps))
    if unknown:
        raise InputError(
            f"run {run!r} has no step(s) {', '.join(map(str, unknown))}; its steps: "
            f"{', '.join(map(str, steps))}"
        )
    if folders:
        set_step_checkpoints(store, run, folders)
    return folders


def rollout_model(store, run: str, rollout_id: int, named: str | None = None) -> ModelChoice:
    """`choose_model` for one rollout of `run` (the resample command and the Resample view)."""
    step = int(store.rollout_keys(run).set_index("rollout_id").loc[int(rollout_id), "step"])
    return choices_for(store, run, [step], named)[step]
