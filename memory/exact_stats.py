"""statistics.pstdev, to the last bit, without Fractions: the z-scores of recall (memory/retrieval.py) take the
population standard deviation of a few hundred scores per question several times, and the standard library's
exact Fraction arithmetic was about 1 ms of a turn (0.26 ms for 300 scores; this: about 0.03 ms).

Python 3.11+ defines pstdev as the correctly rounded square root of the EXACT population variance. Every float is
an integer over a power of two, so over the largest of those denominators (D) all the values are integers
X_i and the exact variance is (n * sum(X_i**2) - sum(X_i)**2) / (n**2 * D**2): Python's integers hold it
exactly, and the root is rounded as the standard library rounds it (round-to-odd, then one division: correctly
rounded whatever the fraction's representation). tests/test_exact_stats.py checks it bit for bit against
statistics.pstdev.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Sequence

#: statistics._sqrt_bit_width: bits kept before the last rounding
_SQRT_BITS = 2 * sys.float_info.mant_dig + 3


def pstdev(xs: Sequence[float]) -> float:
    """statistics.pstdev(xs), bit for bit (finite floats; at least one)."""
    n = len(xs)
    if n < 1:
        raise ValueError("pstdev requires at least one data point")
    ratios = list(map(float.as_integer_ratio, map(float, xs)))  # each denominator a power of two
    top = max(d for _, d in ratios)
    ints = [num * (top // d) for num, d in ratios]  # the values over the largest denominator: integers
    total = sum(ints)
    return _sqrt_of_frac(n * sum(map(operator.mul, ints, ints)) - total * total, n * n * top * top)


def _sqrt_of_frac(n: int, m: int) -> float:
    """The square root of n/m as a float, correctly rounded (statistics._float_sqrt_of_frac)."""
    q = (n.bit_length() - m.bit_length() - _SQRT_BITS) // 2
    if q >= 0:
        return float(_isqrt_rto(n, m << 2 * q) << q)
    return _isqrt_rto(n << -2 * q, m) / (1 << -q)


def _isqrt_rto(n: int, m: int) -> int:
    """The square root of n/m rounded to an integer with round-to-odd."""
    a = math.isqrt(n // m)
    return a | (a * a * m != n)
