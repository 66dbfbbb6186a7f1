package io.github.idmint.client;

/** UnknownTagException means the instances do not know the tag (404 {@code unknown_tag}). It is answered from memory for 5 seconds, without a request. */
public final class UnknownTagException extends RefusedException {
    private static final long serialVersionUID = 1L;

    UnknownTagException(String message, int status, String code, String tag) {
        super(message, status, code, tag);
    }
}
