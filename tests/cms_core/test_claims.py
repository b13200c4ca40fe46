"""Signed shuffle claims (cms_core.claims; issue 37): a batch size is believed only with a MAC under the
key the shuffling collectors and the workers share, bound to the frame's bytes."""

import pytest

from cms_core import claims, wire
from cms_core.errors import InvalidParameterError

KEY = b"0123456789abcdef" * 4
FRAME = wire.HEADER.pack(wire.MAGIC, wire.VERSION, wire.KIND_FRAME, b"\1" * 8, 5) + bytes(25)


def signed(size: int = 1000, key: bytes = KEY, frame: bytes = FRAME) -> list:
    return claims.claim_headers(key, size, claims.new_batch_id(), frame)


def test_a_signed_claim_verifies_and_says_its_batch_size():
    assert claims.verify(KEY, signed(), FRAME, 5) == (1000, None)
    assert claims.verify(KEY, dict(signed()), FRAME, 5) == (1000, None), "a mapping of headers too"


def test_a_frame_without_a_claim_is_not_shuffled_and_not_an_error():
    assert claims.verify(KEY, None, FRAME, 5) == (0, None)
    assert claims.verify(None, [("other", b"1")], FRAME, 5) == (0, None)


@pytest.mark.parametrize("headers, key, reason", [
    ([(wire.SHUFFLE_HEADER, b"1000000")], KEY, "missing_mac"),  # the forgery of issue 37
    ([(wire.SHUFFLE_HEADER, b"1000000")], None, "no_key"),
    (signed(), None, "no_key"),  # a worker without a key believes nothing, signed or not
    (signed(key=b"x" * 32), KEY, "bad_mac"),  # another key
    ([(n, b"1000001" if n == wire.SHUFFLE_HEADER else v) for n, v in signed()], KEY, "bad_mac"),  # size raised
    (signed(frame=FRAME[:-1] + b"\1"), KEY, "bad_mac"),  # the claim of other reports moved onto this frame
    ([(wire.SHUFFLE_HEADER, b"4")], KEY, "invalid_size"),  # fewer than the frame's 5 reports
    (signed() + [(claims.MAC_HEADER, b"00")], KEY, "missing_mac"),  # two MACs: neither believed
    ([(n, "\u00e9" if n == claims.MAC_HEADER else v) for n, v in signed()], KEY, "bad_mac"),  # not bytes
])
def test_a_claim_that_does_not_verify_is_not_believed_and_says_why(headers, key, reason):
    assert claims.verify(key, headers, FRAME, 5) == (0, reason)
    assert reason in claims.REJECT_REASONS


def test_the_key_file_is_checked_once_with_a_message_naming_it(tmp_path):
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(InvalidParameterError, match="--shuffle-claim-key-file.*holds 3 bytes.*at least 32.*every worker"):
        claims.key_file(str(short), "--shuffle-claim-key-file")
    with pytest.raises(InvalidParameterError, match="cannot be read"):
        claims.key_file(str(tmp_path / "missing"), "--shuffle-claim-key-file")
    good = tmp_path / "good"
    good.write_text(" " + "ab" * 32 + "\n")
    assert claims.key_file(str(good), "x") == str(good) and claims.read_key(str(good), "x") == b"ab" * 32


def test_the_batch_id_is_fresh_hex_from_the_csprng():
    ids = {claims.new_batch_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and bytes.fromhex(i.decode()) for i in ids)
