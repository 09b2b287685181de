"""Suffix resampling of one stored rollout, and on an agent run through the run's tool loop.

On an agent run whose environment Credit Lens can run (`backend.models.environments`), a suffix is the rest
of the episode through the run's tool loop (`backend.models.tool_loop`): the policy writes until its turn
ends, the tool answers (its tokens are in the suffix, untrained), the policy goes on, up to the turn limit;
the finished episode is scored by the run's verifier, and V̂(s_t) is the mean of those scores as in
`backend.models.resample`. Positions inside a tool's output are refused with the reason. Without an
environment, positions before a tool's answer are refused too (the policy alone cannot write the answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from backend.core.errors import InputError
from backend.models.engine import Cancel, Engine, Progress
from backend.models.environments import Environment
from backend.models.resample import (
    ResampleResult,
    SuffixSample,
    check_positions,
    position_values,
    resample,
)
from backend.models.tool_loop import Episode, continued, run_episodes, tool_position_problem
from backend.rewards import get_verifier, run_verifier


def untrained_spans(rollout: dict) -> list[tuple[str, int, int]]:
    """The rollout's untrained turns as (role, start, end): its turns whose tokens the loss mask drops all
    of (or, without a mask, every turn not the assistant's); without turns, the mask's runs of 0."""
    mask, turns = rollout.get("loss_mask"), rollout.get("turns")
    if turns:
        return [
            (t["role"], int(t["start"]), int(t["end"]))
            for t in turns
            if (t["role"] != "assistant" if mask is None else not any(mask[t["start"] : t["end"]]))
        ]
    if mask is None:
        return []
    spans, start = [], None
    for t, trained in enumerate(list(mask) + [True]):
        if not trained and start is None:
            start = t
        elif trained and start is not None:
            spans.append(("untrained", start, t))
            start = None
    return spans


def agent_position_problem(pos: int, spans: Sequence[tuple[str, int, int]]) -> str | None:
    """Why suffix resampling cannot value position `pos` of a multi-turn response (None: it can). The sampler
    continues the response with the policy alone: a position on a tool's or the environment's tokens asks
    the policy to write text it never wrote, and a position before such a turn asks it to write past the
    point where the tool or environment answered, which no sampler here can call."""
    for role, start, end in spans:
        if start <= pos < end:
            return (
                f"position {pos} is on the {role} turn's tokens [{start}, {end}): not the policy's text "
                "(not trained), so no policy suffix from it stands for this rollout"
            )
    later = [(role, start, end) for role, start, end in spans if start > pos]
    if later:
        role, start, end = later[0]
        first = max(end for _, _, end in spans)
        return (
            f"position {pos}: its suffix would need the {role}'s answer at [{start}, {end}), which sampling "
            f"from the policy cannot give (no {role} is called); positions from {first} on (after the last "
            "untrained turn) can be resampled"
        )
    return None


def _problem_of(rollout: dict, tool_loop: bool) -> Callable[[int], str | None]:
    """Why a position of `rollout` cannot be resampled: through the run's tool loop (`tool_loop`), only a
    position inside a tool's output is refused; with the policy alone, any before a tool's answer too."""
    if tool_loop and rollout.get("turns"):
        length = len(rollout.get("token_ids") if rollout.get("token_ids") is not None else [])
        return lambda t: tool_position_problem(t, rollout["turns"], length)
    spans = untrained_spans(rollout)
    return lambda t: agent_position_problem(t, spans)


def check_agent_positions(positions: Sequence[int], rollout: dict, tool_loop: bool = False) -> list[int]:
    """`positions` unchanged when every one can be resampled on this (multi-turn) rollout; otherwise an
    InputError naming each refused position and why (`agent_position_problem`, or with the run's tool loop
    `tool_position_problem`)."""
    problem = _problem_of(rollout, tool_loop)
    problems = [p for p in (problem(int(t)) for t in positions) if p]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise InputError(f"rollout {rollout.get('rollout_id')}: " + "; ".join(problems[:3]) + more)
    return list(positions)


def playable_positions(positions: Sequence[int], rollout: dict, tool_loop: bool = False) -> list[int]:
    """The `positions` that can be resampled on this rollout (`check_agent_positions`), in their order."""
    problem = _problem_of(rollout, tool_loop)
    return [int(t) for t in positions if problem(int(t)) is None]


def resamplable(positions: Sequence[int], rollout: dict, tool_loop: bool = False) -> list[int]:
    """The suggested `positions` that can be resampled on this rollout (`check_agent_positions`); an
    InputError with the first one's reason when none can."""
    kept = playable_positions(positions, rollout, tool_loop)
    if positions and not kept:
        check_agent_positions(positions[:1], rollout, tool_loop)
    return kept


TURN_SEED_STRIDE = 1 << 40
"""Through a tool loop, assistant turn k of sample j draws with the sample's seed + k * this (the engine's
per-sample seed), so turns of one sample never share a seed with another sample's."""


def resample_tool_loop(
    engine: Engine,
    environment: Environment,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    turns: Sequence[dict],
    positions: Sequence[int],
    *,
    samples: int = 8,
    verifier: str | Callable = "answer_match",
    ground_truth=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    prefix_seeds: Sequence[int] | None = None,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> ResampleResult:
    """`resample` through the run's tool loop: each of the M samples at a position is the rest of the
    episode (`backend.models.tool_loop`), scored by the verifier on the whole response it completes.

    Sample j at position k has seed `seed + k * M + j` (or `prefix_seeds[k] + j`), as `resample` gives it;
    its turn t draws with that seed + t * TURN_SEED_STRIDE. A cancel keeps the finished episodes.
    """
    token_ids = list(token_ids)
    positions = check_positions(positions, len(token_ids))
    if samples < 1:
        raise InputError(f"samples must be >= 1, got {samples}")
    problems = [p for p in (tool_position_problem(t, turns, len(token_ids)) for t in positions) if p]
    if problems:
        raise InputError("; ".join(problems[:3]))
    verify = get_verifier(verifier) if isinstance(verifier, str) else verifier
    verifier_name = verifier if isinstance(verifier, str) else getattr(verifier, "__name__", "verifier")
    firsts = prefix_seeds if prefix_seeds is not None else [seed + k * samples for k in range(len(positions))]
    episodes = episodes_at(engine, prompt_ids, token_ids, turns, positions, samples, firsts)
    start = time.perf_counter()
    run_episodes(
        engine,
        episodes,
        environment,
        turn_stride=TURN_SEED_STRIDE,
        temperature=temperature,
        top_p=top_p,
        progress=progress,
        cancel=cancel,
    )
    suffixes = [episode_sample(engine, e, verify, verifier_name, ground_truth) for e in episodes if e.done]
    return ResampleResult(
        positions=position_values(suffixes),
        samples=suffixes,
        tokens=sum(len(s.suffix_ids) for s in suffixes),
        seconds=time.perf_counter() - start,
        engine=engine.name,
        model=str(engine.model_dir),
        cancelled=len(suffixes) < len(episodes),
        requested=positions,
    )


def episodes_at(
    engine: Engine,
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    turns: Sequence[dict],
    positions: Sequence[int],
    samples: int,
    firsts: Sequence[int],
    owner: object = None,
) -> list[Episode]:
    """`samples` episodes continued from each position (tag: (owner, pos, j)), sample j at position k with
    seed `firsts[k] + j`; a response without turns is one assistant turn."""
    turns = list(turns) or [{"role": "assistant", "start": 0, "end": len(token_ids)}]
    return [
        continued(prompt_ids, token_ids, turns, pos, int(first) + j, engine.decode, tag=(owner, pos, j))
        for pos, first in zip(positions, firsts, strict=True)
        for j in range(samples)
    ]


def episode_sample(
    engine: Engine, episode: Episode, verify, verifier_name: str, ground_truth
) -> SuffixSample:
    """A finished episode continued from position `pos` as a suffix sample: its tokens from `pos` on, its
    transcript from there by turn, and the verifier's score of the whole response."""
    _, pos, j = episode.tag
    suffix = episode.token_ids[pos:]
    transcript = [
        {"role": t["role"], "text": engine.decode(episode.token_ids[max(t["start"], pos) : t["end"]])}
        for t in episode.turns
        if t["end"] > pos
    ]
    reward = run_verifier(verify, engine.decode(episode.token_ids), ground_truth, verifier_name)
    return SuffixSample(pos, j, episode.seed, suffix, engine.decode(suffix), reward, transcript)


def resample_rollout(
    engine,
    rollout: dict,
    verifier: str | None,
    positions: list[int],
    samples: int,
    progress=None,
    cancel=None,
    seed: int = 0,
    environment: Environment | None = None,
):
    """Suffix resampling of one stored rollout (the dict `Store.rollout` returns) with a loaded engine;
    through the run's tool loop when `environment` is given and the rollout has turns.

    Returns the `ResampleResult` (a cancelled run keeps its finished samples).
    """
    verifier = verifier or "answer_match"
    truth = rollout.get("ground_truth")
    if truth is None:
        truth = (rollout.get("meta") or {}).get("ground_truth")
    if truth is None and ":" not in verifier:
        raise InputError(f"rollout {rollout.get('rollout_id')} has no ground truth for verifier {verifier!r}")
    tool_loop = environment is not None and bool(rollout.get("turns"))
    positions = check_agent_positions(positions, rollout, tool_loop)
    prompt_ids = rollout.get("prompt_ids")
    prompt_ids = list(prompt_ids) if prompt_ids is not None else engine.encode(rollout.get("prompt") or "")
    if tool_loop:
        return resample_tool_loop(
            engine,
            environment,
            prompt_ids,
            list(rollout["token_ids"]),
            rollout["turns"],
            positions,
            samples=samples,
            verifier=verifier,
            ground_truth=truth,
            seed=seed,
            progress=progress,
            cancel=cancel,
        )
    return resample(
        engine,
        prompt_ids,
        list(rollout["token_ids"]),
        positions,
        samples=samples,
        verifier=verifier,
        ground_truth=truth,
        seed=seed,
        progress=progress,
        cancel=cancel,
    )
