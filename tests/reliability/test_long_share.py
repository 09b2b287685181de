"""A time-boxed share of the long loops (`python -m bench reliability --loops`) in every suite run.

The quick tests try the same few cases every time; the long loops explore thousands, and found the failures
of issue 42 item 9 (a damaged TRL Parquet file, a TRL log whose reward is null everywhere) that the quick
cases never reached. Here each importer loop runs on from a fixed seed of its own, on cases the quick tests
do not try, for BOX seconds (about 30 s of the suite in all), so that what the long loops would find has a
chance to fail CI first. The seed fixes which cases come; the machine's speed fixes how many fit in the box
(never fewer than AT_LEAST). The long mode runs the loops whole, so it skips this share.
"""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given, seed, settings

from tests.reliability.conftest import LONG, instance_held
from tests.reliability.loops import (
    PROPERTY_CASES,
    jsonl_byte_mutations,
    parquet_byte_mutations,
    record_mutations,
    until,
)

pytestmark = [
    pytest.mark.skipif(LONG, reason="the long mode runs the loops whole"),
    pytest.mark.timeout(120),
]

SEED = 20261205
BOX = 4.0  # seconds per loop: 7 loops, about 30 s of the suite (a TRL case takes ~0.1 s on the 2-core box)
AT_LEAST = 5  # mutation cases per loop however slow the machine
EXAMPLES = 10  # per hypothesis run of the share (the quick tests run 20 per importer, the long mode 400)
MUTATIONS = {
    "jsonl bytes": jsonl_byte_mutations,
    "record fields": record_mutations,
    "parquet bytes": parquet_byte_mutations,
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_loop_share(base_store, tmp_path, name):
    rng = random.Random(f"{SEED} {name}")  # not the quick tests' seeds (1, 2, 3)
    with instance_held(base_store):
        MUTATIONS[name](base_store, tmp_path, rng, until(time.monotonic() + BOX, AT_LEAST))


@pytest.mark.parametrize("name", sorted(PROPERTY_CASES))
def test_property_share(base_store, tmp_path_factory, name):
    case = PROPERTY_CASES[name]

    def check(**drawn):
        case.check(base_store, tmp_path_factory, **drawn)

    # Hypothesis replays examples and checks that each draws what it drew before, so it cannot stop at the
    # clock: its runs are of EXAMPLES each, from seeds SEED, SEED + 1, ..., for as long as the box lasts.
    fuzz = settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    with instance_held(base_store):
        for run in until(time.monotonic() + BOX, at_least=1):
            fuzz(seed(SEED + run)(given(**case.draws)(check)))()
