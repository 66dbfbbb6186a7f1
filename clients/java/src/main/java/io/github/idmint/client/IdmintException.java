package io.github.idmint.client;

/**
 * IdmintException is every error an {@link IdmintClient} throws. Its subclasses say what to do:
 * {@link RefusedException} (final: asking again cannot help), {@link UnavailableException} (worth a
 * retry after a pause) and {@link ClientClosedException}.
 *
 * <p>When an instance answered, {@link #code()} is its stable, machine-readable error code (the
 * {@code error.code} of its JSON reply, listed in docs/errors.md) and {@link #status()} the HTTP
 * status; decide on those, never on the message.
 */
public class IdmintException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final String tag;

    IdmintException(String message, int status, String code, String tag, Throwable cause) {
        super(message, cause);
        this.status = status;
        this.code = code;
        this.tag = tag;
    }

    /** Returns the HTTP status of the instance's answer, 0 when no instance answered. */
    public int status() {
        return status;
    }

    /** Returns the instance's stable error code (e.g. {@code unknown_tag}), null when none answered. */
    public String code() {
        return code;
    }

    /** Returns the biz_tag of the call. */
    public String tag() {
        return tag;
    }
}
