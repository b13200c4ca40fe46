"""One error root for the whole product, with specific subclasses.

Every error a caller can act on derives from :class:`OCMSError`; the subclasses
say which input was wrong so that a CLI, an HTTP handler or a Kafka consumer can
turn them into a precise message (or a dead-letter reason) without string
matching.
"""

from __future__ import annotations


class OCMSError(Exception):
    """Root of every error raised on purpose by ocms-pipeline."""


class InvalidParameterError(OCMSError, ValueError):
    """A privacy or sketch parameter is out of its domain.

    ``name`` is the parameter's name as the caller spelled it (``epsilon``,
    ``f_star``, ``hash_range`` ...) and ``value`` the offending value, so that
    user-facing layers can point at the exact flag or field.
    """

    def __init__(self, name: str, value: object, reason: str):
        self.name = name
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {name}={value!r}: {reason}")


class InvalidValueError(OCMSError, ValueError):
    """A value to privatize or track is not in the configured dictionary."""


class ParameterMismatchError(OCMSError, ValueError):
    """Two objects built for different parameters (or tracked sets) were combined."""


class FingerprintMismatchError(ParameterMismatchError):
    """Serialized state or a report carries another parameter fingerprint."""


class SerializationError(OCMSError, ValueError):
    """Serialized bytes are truncated, corrupt, or of an unknown version."""


class BackendUnavailableError(OCMSError, RuntimeError):
    """The requested decode backend (e.g. the compiled kernel) is not built here."""


class InvalidReportError(OCMSError, ValueError):
    """A report (a0, a1, z) is outside the field or the hash range."""


class PrivacyBudgetError(OCMSError):
    """A device would spend more epsilon than its budget allows."""


class ClientTooOldError(OCMSError):
    """The registry or device configuration asks for a newer client release than this one (``min_client_version``);
    the message names the release to upgrade to."""

