"""What the run's trainer did: its recipe for the advantage, read from what the import kept, and the credit
every view and command opens on ("as trained").

On a run a trainer made (TRL's GRPOTrainer through its completion logs or the recorder, verl's rollout dumps,
the NeMo-RL / prime-rl / RL Logging Board token dumps), the first numbers shown are the advantage that trainer
trained on:
- rebuilt by the `as_trained` estimator (its rewards summed with their weights, normalized in the group with
  the trainer's ε and scaling) where the recipe is known: it splits exactly by reward channel, so each
  channel's row is its term of what was trained, and its derivation is the trainer's recipe with the run's
  numbers;
- the logged advantage itself (`logged`) where the recipe cannot be rebuilt (TRL's `scale_rewards='batch'`,
  a token dump whose trainer logged per-token advantages), with the reason in `Recipe.notes`.
Credit Lens's own recombination (channels normalized apart, weighted by β, a KL channel) is a labelled
what-if beside it; `what_if_betas` says where each of its β comes from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.core import run_config
from backend.core.run_config import TRL_EPSILON
from backend.store import Store, StoreHandle

AS_TRAINED = "as_trained"
LOGGED = "logged"
TRAINER_ESTIMATORS = (AS_TRAINED, LOGGED)
"""The trainer's own advantage, whole: it reads every reward channel the trainer summed, so a channel
choice changes what a view looks at, never its numbers."""
WHAT_IF_DEFAULT = "grpo"
"""The estimator of the outcome channels in the what-if (and on a run no trainer made)."""
DEFAULT_KL_BETA = 0.05
"""Credit Lens's KL weight in the what-if when the run states none."""
VERL_EPSILON = 1e-6
"""verl's `compute_grpo_outcome_advantage` default ε."""
_TOKEN_DUMPS = {"nemo-rl": "NeMo-RL", "prime-rl": "prime-rl", "rl-logging-board": "RL Logging Board"}


@dataclass(frozen=True)
class Recipe:
    """How the run's trainer made its advantage.

    trainer: who trained it, in words; estimator: `as_trained` (rebuilt) or `logged` (the trainer's own
    numbers); config: the estimator's (key, value) pairs; kl: where KL went and with which coefficient, in
    words; kl_beta: the trainer's KL coefficient (None: unknown); notes: where each number came from, and why
    a recipe was not rebuilt."""

    trainer: str
    estimator: str
    config: tuple = ()
    kl: str = "unknown"
    kl_beta: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        """One line: the credit shown first and how it was made."""
        how = "rebuilt from its rewards" if self.estimator == AS_TRAINED else "the advantage it logged"
        return f"as trained by {self.trainer}: {how}; KL: {self.kl}"

    def as_dict(self) -> dict:
        return {
            "trainer": self.trainer,
            "estimator": self.estimator,
            "config": dict(self.config),
            "kl": self.kl,
            "kl_beta": self.kl_beta,
            "notes": list(self.notes),
        }


def recipe(store: Store, run: str) -> Recipe | None:
    """The run's recipe, or None for a run no known trainer made (the bundled demo, agent and oracle runs:
    Credit Lens's own loops; a native run without trainer meta)."""
    kept = store.trainer_record(run)
    config = run_config.flatten(store.run_info(run)["meta"].get(run_config.CONFIG_KEY))
    formats = set(kept["formats"])
    dumps = sorted(_TOKEN_DUMPS[f] for f in formats if f in _TOKEN_DUMPS)
    if dumps and kept["logged"] < kept["rollouts"]:
        # per-token advantages that vary within a response have no one number per rollout for `logged` to
        # broadcast: no trainer's credit is shown rather than a wrong one (the views open on grpo)
        return None
    if dumps:
        return Recipe(
            ", ".join(dumps),
            LOGGED,
            kl="in the trainer's loss or rewards; its logged advantage includes whatever it put there",
            notes=("the dump carries the advantage the trainer computed: shown as logged",),
        )
    if "trl" in formats or kept["scale_rewards"] or "num_generations" in config:
        return _trl(kept, config)
    if "verl" in formats:
        return _verl(config)
    return None


def _trl(kept: dict, config: dict) -> Recipe:
    """TRL's GRPOTrainer (1.16): R = Σ w_c R_c over the reward functions, (R − mean_G) / (std_G + 1e-4)."""
    notes: list[str] = []
    scales = kept["scale_rewards"] or ([config["scale_rewards"]] if "scale_rewards" in config else [])
    scale = str(scales[0]).lower() if len(scales) == 1 else "group"
    scale = {"true": "group", "false": "none"}.get(scale, scale)
    if not scales:
        notes.append("scale_rewards: not kept with the run; TRL's default 'group'")
    epsilon = kept["advantage_epsilon"][0] if len(kept["advantage_epsilon"]) == 1 else TRL_EPSILON
    notes.append(f"ε = {epsilon:g} (TRL's constant)")
    beta = config.get("beta")
    kl = (
        "not in the log"
        if beta is None
        else ("none (beta = 0)" if not beta else f"in the loss, β = {beta:g}")
    )
    trainer = "TRL GRPOTrainer"
    loss = config.get("loss_type")
    if loss:
        notes.append(f"loss_type={loss!r}: how the loss averages over tokens (length), not in the advantage")
    if config.get("mask_truncated_completions"):
        notes.append("mask_truncated_completions: truncated completions are not trained")
    weights, why = _trl_weights(kept, config)
    if why:
        notes.append(why)
    if len(scales) > 1 or len(kept["advantage_epsilon"]) > 1:
        why = "the rollouts record several scalings or ε"
    elif scale == "batch":
        why = "scale_rewards='batch' divides by the std of the whole generation batch, not kept in the log"
    if why or scale not in ("group", "none"):
        reason = f"not rebuilt: {why or f'scale_rewards={scale!r} is unknown'}"
        if kept["logged"]:
            return Recipe(
                trainer, LOGGED, kl=kl, kl_beta=beta, notes=(*notes, reason + "; the logged advantage")
            )
        return Recipe(trainer, LOGGED, kl=kl, kl_beta=beta, notes=(*notes, reason))
    pairs = (("epsilon", float(epsilon)), ("scale", scale), ("weights", weights))
    return Recipe(trainer, AS_TRAINED, tuple(sorted(pairs)), kl, beta, tuple(notes))


def _trl_weights(kept: dict, config: dict) -> tuple[str, str]:
    """('' or 'name:w,...', why not rebuildable or '')."""
    lists = kept["reward_weights"] or ([config["reward_weights"]] if config.get("reward_weights") else [])
    if not lists:
        return "", ""
    if len(lists) > 1:
        return "", "the rollouts record several reward weights"
    weights = [float(w) for w in (lists[0] if isinstance(lists[0], list) else [lists[0]])]
    if len(set(weights)) == 1 and weights[0] == 1.0:
        return "", ""
    names = kept["reward_names"][0] if len(kept["reward_names"]) == 1 else None
    if not names or len(names) != len(weights):
        return "", "reward_weights differ and the log does not say which reward function has which"
    return ",".join(f"{n}:{w:g}" for n, w in zip(names, weights, strict=True)), ""


def _verl(config: dict) -> Recipe | None:
    """verl's GRPO (`compute_grpo_outcome_advantage`): the dump's `score`, (R − mean_G) / (std_G + 1e-6)."""
    estimator = config.get("algorithm.adv_estimator", "grpo")
    if estimator != "grpo":
        return None  # its advantage needs values or more than the dump keeps: no rebuild, nothing logged
    divide = config.get("algorithm.norm_adv_by_std_in_grpo", True)
    scale = "group" if divide in (True, "true", "True", None) else "none"
    kl = "unknown (no config kept)"
    beta = None
    if config.get("algorithm.use_kl_in_reward"):
        return None  # KL inside the token rewards: a rebuild would need the reference logprobs the dump lacks
    if config.get("actor_rollout_ref.actor.use_kl_loss"):
        beta = config.get("actor_rollout_ref.actor.kl_loss_coef")
        kl = f"in the loss, coefficient {beta}"
    elif config:
        kl = "none"
    pairs = (("epsilon", VERL_EPSILON), ("scale", scale), ("weights", "task:1"))
    notes = ("R = the dump's `score` (verl's reward), ε = 1e-6 (verl's default)",)
    return Recipe("verl", AS_TRAINED, tuple(sorted(pairs)), kl, beta, notes)


def run_recipe(handle: StoreHandle, run: str) -> Recipe | None:
    with handle.read() as store:
        return recipe(store, run)


def default_estimator(handle: StoreHandle, run: str) -> str:
    """The credit every view and command opens on: the trainer's (as trained) where the run has a recipe,
    else GRPO."""
    found = run_recipe(handle, run)
    return found.estimator if found is not None else WHAT_IF_DEFAULT


def chosen_estimator(
    handle: StoreHandle, runs, estimator: str | None, fallback: str | None = WHAT_IF_DEFAULT
):
    """`estimator` as given, or the credit the runs open on: what their trainer trained on (as trained)
    when every run has the same recipe estimator, else `fallback` (grpo; None: no credit columns)."""
    if estimator is not None:
        return estimator
    names = [runs] if isinstance(runs, str) else list(runs)
    found = {getattr(run_recipe(handle, r), "estimator", None) for r in names}
    return found.pop() if len(found) == 1 and None not in found else fallback


def trainer_config(handle: StoreHandle, run: str, estimator: str, overrides: dict) -> dict:
    """`overrides` completed with the run's recipe when `estimator` is the as-trained one (a `--set` pair
    wins)."""
    if estimator != AS_TRAINED:
        return overrides
    found = run_recipe(handle, run)
    if found is None or found.estimator != AS_TRAINED:
        return overrides
    return {**dict(found.config), **overrides}


def what_if_betas(found: Recipe | None, channels: list[str], tuned: dict[str, float] | None = None) -> dict:
    """channel -> {"beta", "source"} of Credit Lens's what-if: a tuned β (the Tune view, `--beta`), else the
    trainer's number where it has one (its reward weight, its KL coefficient), else Credit Lens's default."""
    tuned = tuned or {}
    weights = dict(found.config).get("weights", "") if found is not None else ""
    stated = {}
    for part in filter(None, weights.split(",")):
        name, _, value = part.rpartition(":")
        stated[name] = float(value)
    out = {}
    for c in channels:
        if c in tuned:
            out[c] = {"beta": float(tuned[c]), "source": "tuned"}
        elif c == "kl" and found is not None and found.kl_beta is not None:
            out[c] = {"beta": float(found.kl_beta), "source": f"the trainer's config (KL {found.kl})"}
        elif c == "kl":
            why = "the run has none" if found is not None else "no trainer config"
            out[c] = {"beta": DEFAULT_KL_BETA, "source": f"Credit Lens default: {why}"}
        elif c in stated:
            out[c] = {"beta": stated[c], "source": "the trainer's reward weight"}
        elif found is not None and found.estimator == AS_TRAINED:
            out[c] = {"beta": 1.0, "source": "the trainer's reward weight (1)"}
        else:
            out[c] = {"beta": 1.0, "source": "Credit Lens default"}
    return out


def credit_note(estimator: str, found: Recipe | None, channels: list[str] | None = None) -> str:
    """What the credit on screen is, in one line: the trainer's own, or Credit Lens's what-if beside it with
    each β and its source (the run's channels, when given)."""
    if found is None:
        return ""
    if estimator in (AS_TRAINED, LOGGED) and estimator == found.estimator:
        return found.describe()
    if estimator in (AS_TRAINED, LOGGED):
        return f"{estimator}: a comparison; {found.trainer} trained on {found.estimator}"
    line = f"what-if: Credit Lens's recombination with {estimator}, not what {found.trainer} trained on"
    if channels:
        betas = what_if_betas(found, channels)
        line += "; β: " + ", ".join(f"{c} {b['beta']:g} ({b['source']})" for c, b in betas.items())
    return line


def trainer_betas(found: Recipe | None, channels: list[str]) -> dict[str, float]:
    """The β of the what-if that come from the trainer (its reward weights, its KL coefficient): what the
    recombination uses instead of Credit Lens's defaults."""
    return {
        c: b["beta"]
        for c, b in what_if_betas(found, channels).items()
        if not b["source"].startswith("Credit Lens default")
    }


def credit_info(handle: StoreHandle, run: str, estimator: str, channels: list[str], tuned=None) -> dict:
    """What a command's `--json` says of its credit: as trained or what-if, the note, the recipe, and each
    β with its source."""
    found = run_recipe(handle, run)
    trained = estimator in (AS_TRAINED, LOGGED) and (found is None or estimator == found.estimator)
    return {
        "kind": "as trained"
        if trained and found is not None
        else ("what-if" if found is not None else "estimate"),
        "note": credit_note(estimator, found, channels),
        "recipe": None if found is None else found.as_dict(),
        "betas": {} if trained else what_if_betas(found, channels, tuned),
    }


def trainer_overrides(store: Store, run: str, estimator: str) -> tuple[dict[str, object], list[str]]:
    """(the parameters of `estimator` that follow the run's recipe, notes on what cannot): the whole recipe
    for `as_trained`; for an estimator with grpo's `epsilon` / `norm_by_std` (a recomputation beside it),
    the trainer's ε and whether it divides by the std. `--set` pairs override them."""
    import dataclasses  # noqa: PLC0415 - only here

    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch); on use

    found = recipe(store, run)
    if found is None:
        return {}, []
    notes = [n for n in found.notes if n.startswith("not rebuilt")]
    if estimator == AS_TRAINED:
        return (dict(found.config) if found.estimator == AS_TRAINED else {}), notes
    defaults = {f.name: f.default for f in dataclasses.fields(registry.get(estimator).config_cls)}
    config = dict(found.config)
    overrides: dict[str, object] = {}
    if "epsilon" in defaults and "epsilon" in config:
        overrides["epsilon"] = config["epsilon"]
    if "norm_by_std" in defaults and "scale" in config:
        overrides["norm_by_std"] = config["scale"] == "group"
    return {k: v for k, v in overrides.items() if v != defaults[k]}, notes
