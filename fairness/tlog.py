"""The log in the transparency ecosystem's formats (C2SP), so standard clients can check it.

- signed notes (C2SP signed-note): a text body, a blank line, then signature lines
  `— <key name> <base64(key hash || signature)>`; Ed25519 note keys (type 0x01) and
  cosignature/v1 keys (type 0x04, C2SP tlog-cosignature);
- checkpoints (C2SP tlog-checkpoint): body `<origin>\\n<tree size>\\n<base64 root>\\n`;
- tiles (C2SP tlog-tiles): hash tiles of height 8 and entry bundles, addressed as
  `tile/<L>/<N>[.p/<W>]` and `tile/entries/<N>[.p/<W>]`.

The hashing is RFC 6962's, the same as fairness/merkle.py, so a tile's hashes are the stored
perfect-subtree nodes of `fairness.nodes` at level 8*L.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from fairness.commitments import raw_public_key

SIG_PREFIX = "\u2014 "  # em dash and a space start every signature line
ALG_ED25519 = 0x01
ALG_COSIGNATURE_V1 = 0x04
TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_ENTRY_BYTES = 0xFFFF  # an entry bundle prefixes each entry with a uint16 length
MAX_NOTE_BYTES = 1_000_000
MAX_SIGNATURES = 100  # signed-note: verifiers may stop after this many lines
MAX_TILE_LEVEL = 63 // TILE_HEIGHT + 1
COSIGNATURE_HEADER = "cosignature/v1"

# Key names: non-empty, no whitespace, no `+` (signed-note).
_NAME_RE = re.compile(r"[^\s+]+")
_PATH_ELEMENT_RE = re.compile(r"x\d{3}")
_LAST_ELEMENT_RE = re.compile(r"\d{3}")


class NoteError(ValueError):
    """A note, key, checkpoint or tile path that is malformed or does not verify."""


# --------------------------------------------------------------------------- keys


def key_hash(name: str, alg: int, public_raw: bytes) -> bytes:
    """First 4 bytes of SHA-256(name || 0x0A || alg || public key): the note key id."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public_raw).digest()[:4]


def _check_name(name: str) -> str:
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None or not name.isprintable():
        raise NoteError(f"bad key name {name!r}")
    return name


def verifier_key(name: str, public: Ed25519PublicKey | bytes, alg: int = ALG_ED25519) -> str:
    """`<name>+<hex key hash>+<base64(alg || public key)>` (Go's note.NewEd25519VerifierKey)."""
    raw = public if isinstance(public, bytes) else raw_public_key(public)
    _check_name(name)
    kh = key_hash(name, alg, raw)
    return f"{name}+{kh.hex()}+{base64.b64encode(bytes([alg]) + raw).decode()}"


@dataclass(frozen=True, slots=True)
class Verifier:
    name: str
    alg: int
    public_raw: bytes

    @property
    def hash(self) -> bytes:
        return key_hash(self.name, self.alg, self.public_raw)

    def key(self) -> str:
        return verifier_key(self.name, self.public_raw, self.alg)


def parse_verifier_key(vkey: str) -> Verifier:
    parts = vkey.strip().split("+", 2)  # base64 may contain `+` too
    if len(parts) != 3:
        raise NoteError("verifier key is not <name>+<hash>+<key>")
    name, hash_hex, key_b64 = parts
    _check_name(name)
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except binascii.Error as exc:
        raise NoteError("verifier key is not base64") from exc
    if len(blob) != 33 or blob[0] not in (ALG_ED25519, ALG_COSIGNATURE_V1):
        raise NoteError("verifier key is not an Ed25519 or cosignature/v1 key")
    v = Verifier(name, blob[0], blob[1:])
    if re.fullmatch(r"[0-9a-f]{8}", hash_hex) is None or v.hash.hex() != hash_hex:
        raise NoteError("verifier key hash does not match its name and key")
    return v


# --------------------------------------------------------------------------- notes


def _check_body(body: str) -> None:
    if not body.endswith("\n") or "\n\n" in body or not body.strip():
        raise NoteError("a note body is non-empty text lines, each ending in a newline")


def signature_line(name: str, key_id: bytes, signature: bytes) -> str:
    return f"{SIG_PREFIX}{_check_name(name)} {base64.b64encode(key_id + signature).decode()}\n"


def sign_note(body: str, name: str, key: Ed25519PrivateKey) -> str:
    """The signed note: body, blank line, one Ed25519 signature line."""
    _check_body(body)
    kh = key_hash(name, ALG_ED25519, raw_public_key(key.public_key()))
    return body + "\n" + signature_line(name, kh, key.sign(body.encode()))


@dataclass(frozen=True, slots=True)
class NoteSignature:
    name: str
    key_hash: bytes
    blob: bytes  # what follows the key hash: the signature (with a timestamp for cosignatures)

    def line(self) -> str:
        return signature_line(self.name, self.key_hash, self.blob)


def split_note(text: str) -> tuple[str, list[NoteSignature]]:
    """Body and signature lines of a note (no verification)."""
    if len(text) > MAX_NOTE_BYTES:
        raise NoteError("note too large")
    body, sep, sigs = text.rpartition("\n\n")
    if not sep:
        raise NoteError("note has no blank line before its signatures")
    body += "\n"
    _check_body(body)
    if not sigs.endswith("\n"):
        raise NoteError("note must end with a newline")
    out = []
    for line in sigs[:-1].split("\n"):
        if not line.startswith(SIG_PREFIX):
            raise NoteError("signature line must start with an em dash")
        name, _, b64 = line[len(SIG_PREFIX) :].partition(" ")
        _check_name(name)
        try:
            blob = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise NoteError("signature is not base64") from exc
        if len(blob) < 5:
            raise NoteError("signature too short")
        out.append(NoteSignature(name, blob[:4], blob[4:]))
        if len(out) > MAX_SIGNATURES:
            raise NoteError("too many signatures")
    return body, out


def verify_note(text: str, verifiers: Sequence[Verifier]) -> tuple[str, list[Verifier]]:
    """Check every signature by a known verifier; return the body and the verifiers that
    signed it (at least one, else NoteError). Signatures by unknown keys are ignored, as
    signed-note says; a bad signature by a known key fails the note."""
    body, sigs = split_note(text)
    known = {(v.name, v.hash): v for v in verifiers}
    signed: list[Verifier] = []
    for s in sigs:
        v = known.get((s.name, s.key_hash))
        if v is None:
            continue
        if v.alg == ALG_ED25519:
            ok = _ed25519_ok(v.public_raw, s.blob, body.encode())
        else:
            ok = len(s.blob) == 72 and _ed25519_ok(
                v.public_raw, s.blob[8:], cosigned_message(body, _u64(s.blob[:8]))
            )
        if not ok:
            raise NoteError(f"signature by {s.name} does not verify")
        if v not in signed:
            signed.append(v)
    if not signed:
        raise NoteError("note is not signed by any known key")
    return body, signed


def _u64(b: bytes) -> int:
    return int(struct.unpack(">Q", b)[0])


def _ed25519_ok(public_raw: bytes, sig: bytes, msg: bytes) -> bool:
    if len(sig) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(sig, msg)
    except (InvalidSignature, ValueError):
        return False
    return True


# --------------------------------------------------------------------------- cosignatures


def cosigned_message(body: str, timestamp_s: int) -> bytes:
    """C2SP tlog-cosignature: what a witness signs for a checkpoint at `timestamp_s`."""
    return f"{COSIGNATURE_HEADER}\ntime {timestamp_s}\n{body}".encode()


def cosign(body: str, name: str, key: Ed25519PrivateKey, timestamp_s: int) -> str:
    """A witness's cosignature line for a checkpoint body."""
    _check_body(body)
    kh = key_hash(name, ALG_COSIGNATURE_V1, raw_public_key(key.public_key()))
    sig = key.sign(cosigned_message(body, timestamp_s))
    return signature_line(name, kh, struct.pack(">Q", timestamp_s) + sig)


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        return checkpoint_body(self.origin, self.size, self.root, self.extensions)


def checkpoint_body(origin: str, size: int, root: bytes, extensions: Sequence[str] = ()) -> str:
    if not origin or "\n" in origin or size < 0 or len(root) != 32:
        raise NoteError("checkpoint needs an origin line, a size >= 0 and a 32-byte root")
    lines = [origin, str(size), base64.b64encode(root).decode(), *extensions]
    return "\n".join(lines) + "\n"


def parse_checkpoint(body: str) -> Checkpoint:
    lines = body.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("checkpoint body needs origin, size and root lines")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if not origin or re.fullmatch(r"0|[1-9]\d{0,19}", size_text) is None:
        raise NoteError("checkpoint size is not a decimal number")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error as exc:
        raise NoteError("checkpoint root is not base64") from exc
    if len(root) != 32:
        raise NoteError("checkpoint root is not 32 bytes")
    return Checkpoint(origin, int(size_text), root, tuple(lines[3:-1]))


def open_checkpoint(text: str, log_verifier: Verifier) -> Checkpoint:
    """A checkpoint note signed by the log's key, whose key name must be its origin."""
    body, _ = verify_note(text, [log_verifier])
    cp = parse_checkpoint(body)
    if cp.origin != log_verifier.name:
        raise NoteError("checkpoint origin is not the log key's name")
    return cp


# --------------------------------------------------------------------------- tiles


def encode_index(n: int) -> str:
    """N in 3-digit path elements, all but the last prefixed with `x` (1234067 -> x001/x234/067)."""
    if n < 0:
        raise NoteError("negative tile index")
    groups = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        groups.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(groups))


def tile_path(level: int | None, index: int, width: int = TILE_WIDTH) -> str:
    """`tile/<L>/<N>[.p/<W>]`, or `tile/entries/<N>[.p/<W>]` for level None."""
    if not 1 <= width <= TILE_WIDTH:
        raise NoteError("tile width must be 1..256")
    head = "entries" if level is None else str(level)
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{head}/{encode_index(index)}{suffix}"


@dataclass(frozen=True, slots=True)
class TileRef:
    level: int | None  # None: an entry bundle
    index: int
    width: int


def parse_tile_path(path: str) -> TileRef:
    """Parse `tile/...` in canonical form only (no leading zeros beyond 3 digits, no `.p/256`)."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        raise NoteError("not a tile path")
    head = parts[1]
    if head == "entries":
        level = None
    elif re.fullmatch(r"0|[1-9]\d?", head) and int(head) <= MAX_TILE_LEVEL:
        level = int(head)
    else:
        raise NoteError("bad tile level")
    rest = parts[2:]
    width = TILE_WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        w = rest[-1]
        if re.fullmatch(r"[1-9]\d{0,2}", w) is None or int(w) >= TILE_WIDTH:
            raise NoteError("partial tile width must be 1..255")
        width = int(w)
        rest = [*rest[:-2], rest[-2][:-2]]
    if not rest or len(rest) > 7:
        raise NoteError("bad tile index")
    *prefix, last = rest
    if _LAST_ELEMENT_RE.fullmatch(last) is None or not all(
        _PATH_ELEMENT_RE.fullmatch(p) for p in prefix
    ):
        raise NoteError("bad tile index")
    index = 0
    for p in [*(p[1:] for p in prefix), last]:
        index = index * 1000 + int(p)
    if prefix and prefix[0] == "x000":
        raise NoteError("tile index is not canonical")
    return TileRef(level, index, width)


def tile_width(tree_size: int, level: int | None, index: int) -> int:
    """Hashes (or entries) tile `index` at `level` holds in a tree of `tree_size`: 0 when it
    does not exist yet, 256 when full."""
    shift = 0 if level is None else TILE_HEIGHT * level
    nodes = tree_size >> shift
    return max(0, min(TILE_WIDTH, nodes - index * TILE_WIDTH))


def entry_bundle(entries: Sequence[bytes]) -> bytes:
    out = bytearray()
    for e in entries:
        if len(e) > MAX_ENTRY_BYTES:
            raise NoteError("entry longer than 65535 bytes")
        out += struct.pack(">H", len(e)) + e
    return bytes(out)


def parse_entry_bundle(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise NoteError("truncated entry bundle")
        (n,) = struct.unpack_from(">H", data, pos)
        if pos + 2 + n > len(data):
            raise NoteError("truncated entry bundle")
        out.append(bytes(data[pos + 2 : pos + 2 + n]))
        pos += 2 + n
    return out


def verifiers_by_text(keys: Mapping[str, str] | Sequence[str]) -> list[Verifier]:
    values = keys.values() if isinstance(keys, Mapping) else keys
    return [parse_verifier_key(k) for k in values]
