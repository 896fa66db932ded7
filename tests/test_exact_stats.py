"""memory/exact_stats.pstdev is statistics.pstdev bit for bit (recall's z-scores must not move: the ranking of
recalled messages would)."""

from __future__ import annotations

import random
import statistics

import pytest

from memory.exact_stats import pstdev


def _cases() -> list[list[float]]:
    rng = random.Random(11)
    cases: list[list[float]] = [[1.5, 2.5, 2.5, 2.75, 3.25, 4.75], [0.0, 0.0], [3.0, 3.0, 3.0], [1e-300, 1e300],
                                [-0.0, 0.0, 5e-324], [0.1] * 7 + [0.2], [2.0**60, 2.0**60 + 2**8, -1.0]]
    for size in (2, 3, 10, 100, 500):
        for _ in range(40):
            scale = 10 ** rng.uniform(-6, 6)
            cases.append([rng.gauss(0, 1) * scale for _ in range(size)])  # scores of every sign and scale
            cases.append([round(rng.uniform(0, 30), rng.randint(0, 6)) for _ in range(size)])  # many ties
            cases.append([rng.uniform(-1, 1) * 2.0 ** rng.randint(-40, 40) for _ in range(size)])  # mixed exponents
    return cases


@pytest.mark.parametrize("xs", _cases())
def test_pstdev_matches_the_standard_library_bit_for_bit(xs: list[float]) -> None:
    assert pstdev(xs).hex() == statistics.pstdev(xs).hex()


def test_pstdev_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        pstdev([])
