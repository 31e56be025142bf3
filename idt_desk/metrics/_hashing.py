"""64-bit mixing of integer symbols, shared by the engine and the symboliser.

Symbols are int64; joint symbols (S, A), (S, S'), (S, A, S') are tuples of int64 that the
engine never packs into one integer (HalfCheetah's S x A x S' alphabet is 3**40 > 2**63), so
hash tables key on the tuple and use these hashes only to pick a slot.

The arithmetic wraps modulo 2**64. numba does that silently on uint64; plain numpy scalars
would warn on every overflow, so when the JIT is disabled (``NUMBA_DISABLE_JIT=1``, used to
exercise the pure-Python path) the same functions are defined on Python ints. Both give the
same values, hence the same table layouts and bit-identical results.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["hash1", "hash2", "hash3", "splitmix_next"]

_M = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB

if numba.config.DISABLE_JIT:

    def _mix(x: int) -> int:
        x &= _M
        x ^= x >> 30
        x = (x * _C1) & _M
        x ^= x >> 27
        x = (x * _C2) & _M
        x ^= x >> 31
        return x

    def hash1(a: int) -> int:
        """Non-negative int64 hash of one int64 key."""
        return _mix(int(a) + _GOLDEN) >> 2

    def hash2(a: int, b: int) -> int:
        """Non-negative int64 hash of an ordered pair of int64 keys."""
        return _mix(_mix(int(a) + _GOLDEN) ^ (int(b) & _M)) >> 2

    def hash3(a: int, b: int, c: int) -> int:
        """Non-negative int64 hash of an ordered triple of int64 keys."""
        h = _mix(_mix(int(a) + _GOLDEN) ^ (int(b) & _M))
        return _mix(h ^ (int(c) & _M)) >> 2

    def splitmix_next(state: int) -> tuple[int, int]:
        """Advance a splitmix64 generator: return (new_state, 64-bit output >> 11)."""
        state = (int(state) + _GOLDEN) & _M
        return state, _mix(state) >> 11

else:
    _U_GOLDEN = np.uint64(_GOLDEN)
    _U_C1 = np.uint64(_C1)
    _U_C2 = np.uint64(_C2)
    _U30 = np.uint64(30)
    _U27 = np.uint64(27)
    _U31 = np.uint64(31)
    _U2 = np.uint64(2)
    _U11 = np.uint64(11)

    @numba.njit(inline="always", cache=True)
    def _mix(x):
        x ^= x >> _U30
        x *= _U_C1
        x ^= x >> _U27
        x *= _U_C2
        x ^= x >> _U31
        return x

    @numba.njit(inline="always", cache=True)
    def hash1(a):
        """Non-negative int64 hash of one int64 key."""
        return np.int64(_mix(np.uint64(a) + _U_GOLDEN) >> _U2)

    @numba.njit(inline="always", cache=True)
    def hash2(a, b):
        """Non-negative int64 hash of an ordered pair of int64 keys."""
        return np.int64(_mix(_mix(np.uint64(a) + _U_GOLDEN) ^ np.uint64(b)) >> _U2)

    @numba.njit(inline="always", cache=True)
    def hash3(a, b, c):
        """Non-negative int64 hash of an ordered triple of int64 keys."""
        h = _mix(_mix(np.uint64(a) + _U_GOLDEN) ^ np.uint64(b))
        return np.int64(_mix(h ^ np.uint64(c)) >> _U2)

    @numba.njit(inline="always", cache=True)
    def splitmix_next(state):
        """Advance a splitmix64 generator: return (new_state, 64-bit output >> 11)."""
        state = np.uint64(state) + _U_GOLDEN
        return np.int64(state), np.int64(_mix(state) >> _U11)
