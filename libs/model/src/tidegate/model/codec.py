"""One encoder and one decoder for the bus, so every service reads and writes the same bytes.

Messages are JSON: readable with ``nats sub`` and by subscribers in any language. Decoding
validates against the schema; a :class:`msgspec.ValidationError` carries a JSON path
("Expected `int`, got `str` - at `$.body.podsets[0].count`"): log it whole.
"""

import msgspec

from tidegate.model.events import Envelope

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Envelope)


def encode(envelope: Envelope) -> bytes:
    """Serialize an envelope to its wire form."""
    return _encoder.encode(envelope)


def decode(data: bytes) -> Envelope:
    """Parse and validate an envelope; raises msgspec.ValidationError / DecodeError."""
    return _decoder.decode(data)
