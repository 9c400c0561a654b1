"""Published test vectors verify with gitmem's transparency-log code (docs/transparency.md#vectors).

Sources: the C2SP signed-note spec's example vkey and note; golang.org/x/mod/sumdb/note's
note_test.go (PeterNeumann/EnochRoot keys, a deterministic Ed25519 signature); a real
``sum.golang.org`` tree head quoted in google/trillian-examples formats/log/checkpoint_test.go; the
RFC 6962 leaves, roots and node hashes of transparency-dev/merkle testonly/constants.go, and proofs
from its testdata (the unmodified proofs, and the tampered ones which must fail).
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gitmem.errors import IntegrityError, InvalidInputError
from gitmem.model.tlog import checkpoint, merkle, note

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
)
PETER_SIG = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
ENOCH_SIG = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_NOTE = (
    "go.sum database tree\n6476701\nmb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n\n"
    "— sum.golang.org Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfvimWEPWL+o3GeoWwOoAw=\n"
)
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)


def test_go_note_sign_is_byte_exact() -> None:
    signer = note.ed25519_signer(PETER_SKEY)
    assert signer.verifier().vkey() == PETER_VKEY
    assert note.sign(GO_TEXT, [signer]).encode() == GO_TEXT + "\n" + PETER_SIG


def test_go_note_open_verifies_known_and_ignores_unknown() -> None:
    peter, enoch = note.ed25519_verifier(PETER_VKEY), note.ed25519_verifier(ENOCH_VKEY)
    n = note.parse(GO_TEXT + "\n" + PETER_SIG + ENOCH_SIG)
    assert n.text == GO_TEXT
    assert [s.name for s in note.verified(n, [peter])] == ["PeterNeumann"]
    assert [s.key_id for s in note.verified(n, [peter, enoch])] == [0xC74F20A3, 0xAF0CFE78]
    with pytest.raises(IntegrityError):
        note.open_note(GO_TEXT + "\n" + PETER_SIG, [enoch])


def test_c2sp_signed_note_example_verifies() -> None:
    n = note.open_note(C2SP_NOTE, [note.ed25519_verifier(C2SP_VKEY)])
    assert n.text == "This is an example message.\n"


def test_real_sumdb_checkpoint_verifies() -> None:
    n = note.open_note(SUMDB_NOTE, [note.ed25519_verifier(SUMDB_VKEY)])
    cp = checkpoint.parse_body(n.text)
    assert (cp.origin, cp.size) == ("go.sum database tree", 6476701)
    assert cp.body() == n.text  # encode(parse(x)) is byte-exact
    tampered = SUMDB_NOTE.replace("6476701", "6476702")
    with pytest.raises(IntegrityError):
        note.open_note(tampered, [note.ed25519_verifier(SUMDB_VKEY)])


@pytest.mark.parametrize(
    "bad",
    [
        PETER_VKEY.replace("c74f20a3", "c74f20a4"),  # key id does not match the key
        "PeterNeumann+c74f20a3",
        "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm
    ],
)
def test_bad_vkeys_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        note.ed25519_verifier(bad)


def test_key_id_is_the_spec_formula() -> None:
    name, kid, alg, public = note.parse_vkey(SUMDB_VKEY)
    assert kid == int.from_bytes(hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4], "big")


def test_cosignature_v1_message_checked_by_hand() -> None:
    c = checkpoint.Cosigner("witness.example/w1", bytes(range(32)))
    body = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    sig = c.cosign(body, 1679315147)
    raw = sig.sig
    assert raw[:8] == (1679315147).to_bytes(8, "big") and len(raw) == 72
    msg = b"cosignature/v1\ntime 1679315147\n" + body.encode()
    Ed25519PublicKey.from_public_bytes(c.public_key).verify(raw[8:], msg)  # raises if wrong
    assert sig.key_id == int.from_bytes(
        hashlib.sha256(b"witness.example/w1\n\x04" + c.public_key).digest()[:4], "big"
    )
    assert c.verifier().verify(body, raw) and not c.verifier().verify(body.replace("3\n", "4\n", 1), raw)
    assert checkpoint.cosignature_verifier(c.verifier().vkey()) == c.verifier()


LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                      "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def _b(text: str) -> bytes:
    return base64.b64decode(text)


def test_rfc6962_roots_and_compact_range() -> None:
    hashes = [merkle.leaf_hash(x) for x in LEAVES]
    tree, compact = merkle.Tree(hashes), merkle.CompactRange()
    assert compact.root().hex() == ROOTS[0]
    for size in range(1, 9):
        compact.append(hashes[size - 1])
        assert tree.root(size).hex() == ROOTS[size] == compact.root().hex()


def test_merkle_repo_inclusion_and_consistency_proofs() -> None:
    tree = merkle.Tree([merkle.leaf_hash(x) for x in LEAVES])
    good = [_b(x) for x in ("lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
                            "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
                            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=")]  # fmt: skip
    root8, root1 = bytes.fromhex(ROOTS[8]), bytes.fromhex(ROOTS[1])
    assert tree.inclusion_proof(0, 8) == good == tree.consistency_proof(1, 8)
    assert merkle.verify_inclusion(root1, 0, 8, good, root8)
    assert merkle.verify_consistency(1, 8, root1, root8, good)
    tampered = [_b("nqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c="), *good[1:]]  # testdata: wantErr
    assert not merkle.verify_inclusion(root1, 0, 8, tampered, root8)
    assert not merkle.verify_consistency(1, 8, root1, root8, [])  # "empty proof"
    r2 = _b("+sVCA+fMaWzw38tCySodnbr3CtnmIfS9jZhmLwDjwSU=")
    r5 = _b("Tju7H3tHjc/nH7YxYxUZo7yhLJrvyhYSv85ME6hiZNQ=")
    assert not merkle.verify_consistency(2, 5, r2, r5, [_b("Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=")])
    assert merkle.verify_consistency(2, 5, r2, r5, tree.consistency_proof(2, 5))


def test_every_proof_up_to_33_leaves_round_trips_and_tampering_fails() -> None:
    hashes = [merkle.leaf_hash(bytes([i])) for i in range(33)]
    tree = merkle.Tree(hashes)
    for n in range(1, 34):
        root = tree.root(n)
        for i in range(n):
            p = tree.inclusion_proof(i, n)
            assert merkle.verify_inclusion(hashes[i], i, n, p, root)
            assert not merkle.verify_inclusion(hashes[(i + 1) % 33], i, n, p, root) or n == 1 and i == 0
        for m in range(0, n + 1):
            p = tree.consistency_proof(m, n)
            assert merkle.verify_consistency(m, n, tree.root(m), root, p)
            if 0 < m < n:
                assert not merkle.verify_consistency(m, n, tree.root(m), hashes[0], p)
                assert not merkle.verify_consistency(m, n, hashes[1], root, p)
