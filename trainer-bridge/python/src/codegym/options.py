"""Client options, kept apart from environment kwargs: where the server is and how to talk to it."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

__all__ = ["ClientOptions"]


@dataclass(frozen=True)
class ClientOptions:
    """How a client reaches a codegym server.

    Attributes:
        timeout: Deadline of each unary call and of session requests, in seconds.
        evaluate_timeout: Deadline of one `Evaluate` call (it runs programs), in seconds.
        tls: Use a TLS channel (`grpc.ssl_channel_credentials`) instead of plaintext.
        root_certificates: PEM roots for TLS; None uses gRPC's default roots.
        retries: How many times a retryable failure (UNAVAILABLE, RESOURCE_EXHAUSTED, connection
            errors) is retried by the reward functions before they give up.
        backoff: First retry delay in seconds; doubled after each retry.
        max_backoff: Longest retry delay in seconds.
    """

    timeout: float = 30.0
    evaluate_timeout: float = 600.0
    tls: bool = False
    root_certificates: bytes | None = None
    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials for TLS, or None for a plaintext channel."""
        return grpc.ssl_channel_credentials(self.root_certificates) if self.tls else None

    def delay(self, attempt: int) -> float:
        """The delay before retry number `attempt` (0-based), in seconds."""
        # 2.0**attempt, not 2**attempt: a large attempt is infinity (capped), never an integer too
        # large for a float (OverflowError); the exponent is capped where float pow would overflow.
        return float(min(self.max_backoff, self.backoff * 2.0 ** min(attempt, 1023)))
