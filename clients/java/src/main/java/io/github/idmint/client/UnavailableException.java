package io.github.idmint.client;

import java.time.Duration;

/**
 * UnavailableException means no ID could be handed out in time: both ranges of the tag are empty and
 * no instance granted a new one (down, unreachable, 503, 429), after the client tried every
 * instance. It is worth a retry after a pause; no refusal is ever one. {@link #code()} is the last
 * instance's code when one answered (e.g. {@code tag_exhausted}, which needs an operator).
 */
public final class UnavailableException extends IdmintException {
    private static final long serialVersionUID = 1L;

    private final Duration retryAfter;

    UnavailableException(String message, int status, String code, String tag, Duration retryAfter, Throwable cause) {
        super(message, status, code, tag, cause);
        this.retryAfter = retryAfter;
    }

    /** Returns how long to wait before asking again (the client's backoff, or an instance's Retry-After). */
    public Duration retryAfter() {
        return retryAfter;
    }
}
