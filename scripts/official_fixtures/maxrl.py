"""Make tests/backend/estimators/fixtures/official/maxrl.json from the official MaxRL code.

    python scripts/official_fixtures/maxrl.py /path/to/MaxRL   # a work tree at the commit below

The official repository (Zanette-Labs/MaxRL) publishes its code as a one-line patch of verl's
`compute_grpo_outcome_advantage`, shown as a diff on the project page `site/code.html`: the GRPO line is
marked `line-delete`, the MaxRL line `line-add`. This script reads that page from the checkout, keeps the
function with the patch applied (drops the deleted line, unwraps the added one, unescapes the HTML) and
runs it. The page elides verl's opening lines under the comment `# 0. Define Arguments`; they are put back
as verl writes them (`scores = token_level_rewards.sum(dim=-1)`, `id2score = defaultdict(list)`,
`id2mean = {}`, `id2std = {}`), and nothing else is added: in particular the page has no branch for a
group of one (verl's own function gives it mean 0 and std 1), so a singleton gets (R - R) / (R + eps).
"""

from __future__ import annotations

import html
import re
from collections import defaultdict

import common
import numpy as np
import torch

REPOSITORY = "Zanette-Labs/MaxRL"
COMMIT = "8bafaa9cf04c9d68511afd4c2cff75afbc8dc3a2"
FUNCTION = (
    "site/code.html: compute_advantage (verl compute_grpo_outcome_advantage with the MaxRL line "
    "added and the GRPO line deleted), run with verl's elided opening lines put back"
)
VERL_OPENING = (
    "scores = token_level_rewards.sum(dim=-1)\n"
    "    id2score = defaultdict(list)\n"
    "    id2mean = {}\n"
    "    id2std = {}"
)

# (group ids, sequence scores, response lengths); every response's reward sits on its last token as in verl
CASES = [
    # binary rewards: pass rates 1/4, 3/4, 0 (no success: 0 / eps = 0), 1 (all succeed), a singleton
    (
        [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 4],
        [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
        [3, 5, 2, 4, 6, 1, 3, 2, 4, 4, 2, 5, 3, 2],
    ),
    # groups of 8 with pass rates 1/8 (the largest advantage, 7) and 5/8, interleaved ids
    (
        [7, 9, 7, 9, 7, 9, 7, 9, 7, 9, 7, 9, 7, 9, 7, 9],
        [0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        [4, 2, 3, 6, 5, 1, 2, 7, 3, 3, 2, 4, 5, 2, 6, 3],
    ),
    # rewards outside {0, 1}: fractional, and groups with a negative mean (the code divides anyway)
    ([0, 0, 0, 1, 1, 1, 2, 2], [0.25, 0.5, 1.5, -1.0, 0.0, -0.5, -1.0, 1.0], [2, 3, 4, 2, 5, 3, 2, 2]),
]


def official_function(checkout) -> tuple:
    """compute_advantage from the project page, patched as the page shows, and its source as run."""
    page = (checkout / "site" / "code.html").read_text()
    match = re.search(r'<code class="language-python">(.*?)</code>', page, re.S)
    if match is None:
        raise SystemExit(f'{checkout}/site/code.html: no <code class="language-python"> block')
    lines = [line for line in match.group(1).splitlines() if "line-delete" not in line]
    source = html.unescape(re.sub(r"</?span[^>]*>", "", "\n".join(lines)))
    if "# 0. Define Arguments" not in source or "id2mean[index[i]] + epsilon" not in source:
        raise SystemExit("site/code.html: the patch is not the one this script was written for")
    source = source.replace("# 0. Define Arguments", VERL_OPENING)
    namespace = {"torch": torch, "np": np, "defaultdict": defaultdict}
    exec(compile(source, "site/code.html", "exec"), namespace)  # noqa: S102 - the official code itself
    return namespace["compute_advantage"], source


def main() -> None:
    args = common.parse_args(__doc__, REPOSITORY, COMMIT)
    commit = common.checkout_commit(args.checkout, COMMIT, args.any_commit)
    compute_advantage, source = official_function(args.checkout)
    fixture = common.provenance("maxrl.py", REPOSITORY, COMMIT, commit, FUNCTION, ("torch", "numpy"))
    fixture["source_as_run"] = source.splitlines()
    fixture["cases"] = []
    for groups, scores, lengths in CASES:
        T = max(lengths)
        mask = torch.zeros(len(scores), T)
        rewards = torch.zeros(len(scores), T)
        for i, (score, length) in enumerate(zip(scores, lengths, strict=True)):
            mask[i, :length] = 1.0
            rewards[i, length - 1] = score
        advantages, returns = compute_advantage(rewards, mask, np.array(groups, dtype=object))
        fixture["cases"].append(
            {
                "group_ids": groups,
                "scores": scores,
                "lengths": lengths,
                "epsilon": 1e-6,
                "advantages": [row[:n] for row, n in zip(advantages.tolist(), lengths, strict=True)],
            }
        )
    common.write("maxrl", fixture, args.out)


if __name__ == "__main__":
    main()
