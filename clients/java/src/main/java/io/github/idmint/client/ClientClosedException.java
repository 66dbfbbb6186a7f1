package io.github.idmint.client;

/** ClientClosedException means the client was closed; it hands out no ID any more. */
public final class ClientClosedException extends IdmintException {
    private static final long serialVersionUID = 1L;

    ClientClosedException(String tag) {
        super("idmint client closed", 0, null, tag, null);
    }
}
