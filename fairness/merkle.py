"""RFC 6962 / RFC 9162 Merkle tree hashing, inclusion and consistency proofs (pure).

Proof generation follows RFC 9162 section 2.1.3.1/2.1.4.1 (recursive definitions);
verification follows the iterative algorithms of sections 2.1.3.2 and 2.1.4.2.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class MerkleError(ValueError):
    """Bad arguments for proof generation (index or sizes out of range)."""


class ProofError(ValueError):
    """A proof that does not verify."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly smaller than n (n >= 2)."""
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH over already-hashed leaves."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(root_from_leaf_hashes(hashes[:k]), root_from_leaf_hashes(hashes[k:]))


def tree_head(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over raw leaf data."""
    return root_from_leaf_hashes([leaf_hash(d) for d in leaves])


def inclusion_proof(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """PATH(m, D[n]) over leaf hashes."""
    n = len(hashes)
    if not 0 <= index < n:
        raise MerkleError(f"leaf index {index} out of range for tree size {n}")
    return _path(index, hashes)


def _path(m: int, d: Sequence[bytes]) -> list[bytes]:
    n = len(d)
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return [*_path(m, d[:k]), root_from_leaf_hashes(d[k:])]
    return [*_path(m - k, d[k:]), root_from_leaf_hashes(d[:k])]


def consistency_proof(hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(m, D[n]) over leaf hashes; empty when m == n or m == 0."""
    n = len(hashes)
    if not 0 <= old_size <= n:
        raise MerkleError(f"old size {old_size} out of range for tree size {n}")
    if old_size in (0, n):
        return []
    return _subproof(old_size, hashes, True)


def _subproof(m: int, d: Sequence[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [root_from_leaf_hashes(d)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, d[:k], b), root_from_leaf_hashes(d[k:])]
    return [*_subproof(m - k, d[k:], False), root_from_leaf_hashes(d[:k])]


def root_from_inclusion_proof(
    index: int, tree_size: int, leaf: bytes, proof: Sequence[bytes]
) -> bytes:
    """RFC 9162 2.1.3.2 steps 1-5: the root implied by a leaf hash and its audit path."""
    if not 0 <= index < tree_size:
        raise ProofError(f"leaf index {index} not below tree size {tree_size}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("proof element is not 32 bytes")
    fn, sn = index, tree_size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn != 0 and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof too short")
    return r


def verify_inclusion(
    index: int, tree_size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise ProofError unless `leaf` (a leaf hash) is at `index` in the tree with `root`."""
    if root_from_inclusion_proof(index, tree_size, leaf, proof) != root:
        raise ProofError("inclusion proof does not lead to the expected root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 2.1.4.2: raise ProofError unless the tree of old_size is a prefix of new_size."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"old size {old_size} exceeds new size {new_size}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("proof element is not 32 bytes")
    if old_size == new_size:
        if proof:
            raise ProofError("consistency proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError("roots differ for equal tree sizes")
        return
    if old_size == 0:
        if proof:
            raise ProofError("consistency proof from the empty tree must be empty")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # exact power of two: old root is the first node
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn != 0 and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof too short")
    if fr != old_root or sr != new_root:
        raise ProofError("consistency proof does not match the roots")


class CompactRange:
    """The frontier of a tree: roots of its perfect subtrees, largest first (O(log n) append).

    `hashes[i]` covers 2**bit leaves, where the bits of `size` are taken from most to least
    significant. This is what the log store keeps in its head row.
    """

    __slots__ = ("hashes", "size")

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()) -> None:
        if size < 0 or bin(size).count("1") != len(hashes):
            raise MerkleError("compact range: number of hashes must equal popcount(size)")
        self.size = size
        self.hashes = list(hashes)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Append one leaf hash; return the perfect-subtree nodes it completes, as
        (level, index, hash): the leaf itself at level 0, then every merge."""
        h = leaf
        size = self.size
        index = self.size
        created = [(0, index, leaf)]
        level = 0
        while size & 1:
            h = node_hash(self.hashes.pop(), h)
            size >>= 1
            level += 1
            created.append((level, index >> level, h))
        self.hashes.append(h)
        self.size += 1
        return created

    def root(self) -> bytes:
        if not self.hashes:
            return EMPTY_ROOT
        r = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            r = node_hash(h, r)
        return r


# --- proofs from stored perfect-subtree nodes (what the log store keeps) ----------------


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges [a, b) whose tree hashes form PATH(index, D[size]), in proof order."""
    if not 0 <= index < size:
        raise MerkleError(f"leaf index {index} out of range for tree size {size}")
    out: list[tuple[int, int]] = []
    off, m, n = 0, index, size
    while n > 1:
        k = _split(n)
        if m < k:
            out.append((off + k, off + n))
            n = k
        else:
            out.append((off, off + k))
            off, m, n = off + k, m - k, n - k
    out.reverse()
    return out


def consistency_ranges(old_size: int, size: int) -> list[tuple[int, int]]:
    """The leaf ranges [a, b) whose tree hashes form PROOF(old_size, D[size]), in order."""
    if not 0 <= old_size <= size:
        raise MerkleError(f"old size {old_size} out of range for tree size {size}")
    if old_size in (0, size):
        return []
    out: list[tuple[int, int]] = []
    off, m, n, b = 0, old_size, size, True
    while m != n:
        k = _split(n)
        if m <= k:
            out.append((off + k, off + n))
            n = k
        else:
            out.append((off, off + k))
            off, m, n, b = off + k, m - k, n - k, False
    if not b:
        out.append((off, off + n))
    out.reverse()
    return out


def perfect_nodes(start: int, end: int) -> list[tuple[int, int]]:
    """Split [start, end) into aligned perfect subtrees, largest first, as (level, index)."""
    out = []
    pos, length = start, end - start
    for level in range(length.bit_length() - 1, -1, -1):
        if length >> level & 1:
            if pos % (1 << level):
                raise MerkleError(f"range [{start}, {end}) is not aligned")
            out.append((level, pos >> level))
            pos += 1 << level
    return out


def fold_range(hashes: Sequence[bytes]) -> bytes:
    """Tree hash of a range from its perfect subtrees (largest first)."""
    if not hashes:
        raise MerkleError("empty range")
    r = hashes[-1]
    for h in reversed(hashes[:-1]):
        r = node_hash(h, r)
    return r


class MemoryTree:
    """An in-memory log (tests, tools): leaf hashes kept in order, proofs on demand."""

    def __init__(self) -> None:
        self.hashes: list[bytes] = []

    @property
    def size(self) -> int:
        return len(self.hashes)

    def append(self, data: bytes) -> int:
        self.hashes.append(leaf_hash(data))
        return len(self.hashes) - 1

    def root(self, size: int | None = None) -> bytes:
        return root_from_leaf_hashes(self.hashes[: self.size if size is None else size])

    def inclusion(self, index: int, size: int | None = None) -> list[bytes]:
        return inclusion_proof(self.hashes[: self.size if size is None else size], index)

    def consistency(self, old_size: int, size: int | None = None) -> list[bytes]:
        return consistency_proof(self.hashes[: self.size if size is None else size], old_size)
