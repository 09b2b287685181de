"""`python -m bench estimators [--repeat N] [--only NAME,...] [--device cpu|cuda]`: estimator speed.

Measured in one run, on ragged batches (lengths uniform in [T/8, T], groups of 8, a shared prefix per
group so prefix trees branch) at (B=512, T=1024) and (B=64, T=8192):
- tokens/s of every registered estimator with its defaults (the registry call without `validate`);
- GAE (`functional.compute_gae`, also with 10% mid-sequence mask holes, and with one lambda per response
  as VAPO's length-adaptive option uses; the loop's cost does not depend on lambda) and GRPO
  (`functional.compute_grpo`) against verl-style python loops (twins/verl.py) timed in the same run,
  and against verl itself when it is importable;
- the prefix tree of one 16 x 4096-token group.
Targets on 2 CPU cores: GAE >= 20x the loop at 512x1024 and >= 50x at 64x8192; every model-free
estimator >= 5M tokens/s; prefix tree 16x4096 < 20 ms. Times are the best of `--repeat` runs of the
process CPU time by default (`--clock wall` for elapsed time): the machine is shared, and CPU time does
not count the time other processes hold the cores. It sums all threads, so it over-states the
multi-threaded kernels, never the single-threaded python loops: the ratios are conservative.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import functional as F
from backend.estimators import registry
from backend.estimators.tree import build_prefix_tree
from backend.estimators.twins.verl import verl_gae_loop, verl_grpo_loop

TEXTS = ["the", " ", "x", "=", "1", "2", ".", ",", "\n", "so", "answer", "is"]
# Estimators that need a fitted model (ridge fits) rather than closed-form arithmetic.
MODEL_BASED = {"token_rm", "rudder", "gae"}
CLOCK = "cpu"


def make_batch(B: int, T: int, seed: int = 0, group: int = 8, device: str = "cpu") -> RolloutBatch:
    gen = torch.Generator().manual_seed(seed)
    L = torch.randint(T // 8, T + 1, (B,), generator=gen)
    mask = torch.arange(T) < L[:, None]
    tokens = torch.randint(1, len(TEXTS), (B, T), generator=gen)
    groups = torch.arange(B) // group
    stem = tokens[groups * group, : T // 16]  # responses of a group share a prefix
    tokens[:, : T // 16] = stem
    tokens = tokens * mask
    text = [[TEXTS[i] for i in row[: int(n)]] for row, n in zip(tokens.tolist(), L.tolist(), strict=True)]
    f = lambda x: torch.where(mask, x, 0.0)  # noqa: E731
    mc_mask = (torch.rand(B, T, generator=gen) < 0.01) & mask
    return RolloutBatch(
        response_mask=mask,
        token_ids=tokens,
        group_ids=groups,
        rollout_ids=torch.arange(B),
        steps=torch.zeros(B, dtype=torch.long),
        scores={"task": (torch.rand(B, generator=gen) < 0.5).float()},
        logprobs=f(-torch.rand(B, T, generator=gen) * 3),
        ref_logprobs=f(-torch.rand(B, T, generator=gen) * 3),
        entropies=f(torch.rand(B, T, generator=gen) * 2),
        values=f(torch.randn(B, T, generator=gen)),
        tokens=text,
        extras={
            "mc_values": f(torch.rand(B, T, generator=gen)),
            "mc_mask": mc_mask.float(),
            "old_entropies": f(torch.rand(B, T, generator=gen) * 2),
        },  # entropy_drop_mask's old policy
    ).to(device)


def timeit(repeat: int, fn, *args, **kwargs) -> float:
    fn(*args, **kwargs)  # warm up (caches, allocator)
    times = []
    clock = time.perf_counter if CLOCK == "wall" else time.process_time
    for _ in range(repeat):
        t0 = clock()
        fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(clock() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    global CLOCK
    if args.threads:
        torch.set_num_threads(args.threads)
    CLOCK = args.clock if args.device == "cpu" else "wall"
    names = [n for n in registry.names() if not args.only or n in args.only.split(",")]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
        f"clock {CLOCK} (best of {args.repeat}), "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    try:
        from verl.trainer.ppo import core_algos  # type: ignore  # noqa: PLC0415 - optional: verl
    except Exception:
        core_algos = None
    shapes = [(512, 1024), (64, 8192)]
    batches = {s: make_batch(*s, device=args.device) for s in shapes}
    ok = True

    print(f"\n{'kernel':<34} {'shape':>10} {'ms':>9} {'loop ms':>9} {'ratio':>7} {'target':>7}")
    for (B, T), batch in batches.items():
        ok &= _kernel_rows(B, T, batch, args.repeat, args.device, core_algos)
    ok &= _estimator_rows(names, shapes, batches, args.repeat)
    ok &= _prefix_tree_row(args.repeat, args.device)
    print("all targets met" if ok else "some targets NOT met (see rows above)")
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench estimators")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated estimator names")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: CPU seconds of this process (robust on a shared machine; counts every "
        "thread, so it over-states multi-threaded kernels); wall: elapsed time",
    )
    return parser.parse_args(argv)


def _kernel_rows(B: int, T: int, batch: RolloutBatch, repeat: int, device: str, core_algos) -> bool:
    """GAE (plain, with holes, per-response lambda) and GRPO on one batch against the verl-style loops
    (and verl itself, `core_algos`, when importable); whether GAE met its target."""
    ok = True
    mask = batch.response_mask
    r = torch.randn(B, T, generator=torch.Generator().manual_seed(1)).to(device) * mask
    v = batch.values
    holes = mask & (torch.rand(B, T, generator=torch.Generator().manual_seed(2)).to(device) > 0.1)
    few = max(1, repeat // 2)
    loop = timeit(few, verl_gae_loop, r.cpu(), v.cpu(), mask.cpu(), 1.0, 0.95)
    fast = timeit(repeat, F.compute_gae, r, v, mask, 1.0, 0.95)
    fast_h = timeit(repeat, F.compute_gae, r, v, holes, 1.0, 0.95)
    lam_rows = (1.0 - 1.0 / (0.05 * mask.sum(1).clamp(min=1).double())).clamp(min=0.0)  # VAPO's lambda
    fast_l = timeit(repeat, F.compute_gae, r, v, mask, 1.0, lam_rows)
    target = 20 if T == 1024 else 50
    for label, t in (("GAE (blocked scan)", fast), ("GAE, 10% mid-sequence holes", fast_h)):
        ratio = loop / t
        ok &= ratio >= target
        print(f"{label:<34} {B:>4}x{T:<5} {t * 1e3:>9.2f} {loop * 1e3:>9.1f} {ratio:>6.0f}x {target:>6}x")
    # one (block x block) power matrix per response (batched matmul): no target of its own yet
    label = "GAE, per-response lambda (VAPO)"
    print(f"{label:<34} {B:>4}x{T:<5} {fast_l * 1e3:>9.2f} {loop * 1e3:>9.1f} {loop / fast_l:>6.0f}x")
    if core_algos is not None:
        tv = timeit(
            few, core_algos.compute_gae_advantage_return, r.cpu(), v.cpu(), mask.float().cpu(), 1.0, 0.95
        )
        print(
            f"{'  vs verl itself':<34} {B:>4}x{T:<5} {fast * 1e3:>9.2f} {tv * 1e3:>9.1f} {tv / fast:>6.0f}x"
        )
    scores = batch.scores["task"]
    tr = torch.zeros(B, T)
    tr[:, 0] = scores.cpu()
    index = batch.group_ids.cpu().tolist()
    g_loop = timeit(repeat, verl_grpo_loop, tr, mask.float().cpu(), index)
    g_fast = timeit(repeat, F.compute_grpo, scores, batch.group_ids, mask)
    print(
        f"{'GRPO (index_add)':<34} {B:>4}x{T:<5} {g_fast * 1e3:>9.2f} {g_loop * 1e3:>9.1f} "
        f"{g_loop / g_fast:>6.0f}x {'':>7}"
    )
    return ok


def _estimator_rows(names: list[str], shapes: list[tuple[int, int]], batches: dict, repeat: int) -> bool:
    """Tokens/s of every estimator in `names` on every batch; whether each model-free one met 5M/s."""
    ok = True
    print(
        f"\n{'estimator':<20} {'family':<12} "
        + " ".join(f"{f'{B}x{T} Mtok/s':>17}" for B, T in shapes)
        + f" {'target':>8}"
    )
    runs = [(name, registry.get(name), registry.get(name).config_cls(), name) for name in names]
    if "prefix_tree" in names:  # node tables (opt-in) are for drawing one group; the credit needs none
        spec = registry.get("prefix_tree")
        runs.append(("prefix_tree", spec, spec.config_cls(nodes=True), "prefix_tree nodes=1"))
    for name, spec, config, label in runs:
        rates = []
        for batch in batches.values():
            n_tok = int(batch.response_mask.sum())
            t = timeit(repeat, spec.fn, batch, config)
            rates.append(n_tok / t / 1e6)
        model_free = name not in MODEL_BASED and label == name  # extra rows (opt-in tables) are shown only
        met = min(rates) >= 5.0
        if model_free:
            ok &= met
        target = ">=5 " + ("ok" if met else "NO")
        if not model_free:
            target = "(fit)" if label == name else "(info)"
        print(f"{label:<20} {spec.family:<12} " + " ".join(f"{x:>17.1f}" for x in rates) + f" {target:>8}")
    return ok


def _prefix_tree_row(repeat: int, device: str) -> bool:
    """The prefix tree of one 16 x 4096-token group, half of it sharing a long prefix; whether < 20 ms."""
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 4, (16, 4096), generator=gen)
    tokens[:, :64] = 1
    tokens[8:, :2048] = tokens[0, :2048]  # half the group shares a long prefix
    tmask = torch.ones(16, 4096, dtype=torch.bool)
    gid = torch.zeros(16, dtype=torch.long)
    z = torch.randn(16)
    args_t = [x.to(device) for x in (tokens, tmask, gid, z)]
    t_tree = timeit(repeat, build_prefix_tree, *args_t)
    t_nodes = timeit(repeat, build_prefix_tree, *args_t, with_nodes=True)
    print(
        f"\nprefix tree 16x4096: {t_tree * 1e3:.1f} ms (target < 20 ms), with node tables "
        f"{t_nodes * 1e3:.1f} ms"
    )
    return t_tree < 0.020
