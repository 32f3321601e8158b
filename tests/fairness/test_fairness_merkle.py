"""Property tests: proofs verify across many tree sizes and fail when anything is altered."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.merkle import (
    CompactRange,
    MerkleError,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)


def _hashes(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


ALL = _hashes(300)


def test_every_inclusion_and_consistency_up_to_40_leaves() -> None:
    for n in range(1, 41):
        root = root_from_leaf_hashes(ALL[:n])
        for i in range(n):
            verify_inclusion(i, n, ALL[i], inclusion_proof(ALL[:n], i), root)
        for m in range(n + 1):
            old_root = root_from_leaf_hashes(ALL[:m])
            verify_consistency(m, n, old_root, root, consistency_proof(ALL[:n], m))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_inclusion_property(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 300))
    i = data.draw(st.integers(0, n - 1))
    root = root_from_leaf_hashes(ALL[:n])
    proof = inclusion_proof(ALL[:n], i)
    verify_inclusion(i, n, ALL[i], proof, root)
    # wrong leaf, wrong index, wrong size, tampered path: all rejected
    with pytest.raises(ProofError):
        verify_inclusion(i, n, leaf_hash(b"other"), proof, root)
    if n > 1:
        j = data.draw(st.integers(0, n - 1).filter(lambda x: x != i))
        with pytest.raises(ProofError):
            verify_inclusion(j, n, ALL[i], proof, root)
        k = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[k] = bytes([bad[k][0] ^ 1]) + bad[k][1:]
        with pytest.raises(ProofError):
            verify_inclusion(i, n, ALL[i], bad, root)
        with pytest.raises(ProofError):
            verify_inclusion(i, n, ALL[i], proof[:-1], root)
        with pytest.raises(ProofError):
            verify_inclusion(i, n, ALL[i], [*proof, proof[0]], root)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_consistency_property(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 300))
    m = data.draw(st.integers(1, n))
    old, new = root_from_leaf_hashes(ALL[:m]), root_from_leaf_hashes(ALL[:n])
    proof = consistency_proof(ALL[:n], m)
    verify_consistency(m, n, old, new, proof)
    if m < n:
        with pytest.raises(ProofError):
            verify_consistency(m, n, leaf_hash(b"x"), new, proof)
        with pytest.raises(ProofError):
            verify_consistency(m, n, old, leaf_hash(b"x"), proof)
        forked = [*ALL[: m - 1], leaf_hash(b"forked"), *ALL[m:n]]
        with pytest.raises(ProofError):
            verify_consistency(m, n, old, root_from_leaf_hashes(forked), proof)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 300))
def test_compact_range_tracks_root(n: int) -> None:
    cr = CompactRange()
    for h in ALL[:n]:
        cr.append(h)
    assert cr.root() == root_from_leaf_hashes(ALL[:n])
    again = CompactRange(cr.size, cr.hashes)
    assert again.root() == cr.root()


def test_bad_arguments() -> None:
    with pytest.raises(MerkleError):
        inclusion_proof(ALL[:3], 3)
    with pytest.raises(MerkleError):
        consistency_proof(ALL[:3], 4)
    with pytest.raises(ProofError):
        verify_inclusion(3, 3, ALL[0], [], ALL[0])
    with pytest.raises(ProofError):
        verify_consistency(4, 3, ALL[0], ALL[0], [])
    with pytest.raises(MerkleError):
        CompactRange(3, [ALL[0]])
