package io.github.idmint.client;

/** InvalidTagException means the tag is not a valid name (1 to 64 of {@code A-Za-z0-9_.:-}, starting with a letter or digit), found by the client before any request or by an instance (400 {@code invalid_biz_tag}). */
public final class InvalidTagException extends RefusedException {
    private static final long serialVersionUID = 1L;

    InvalidTagException(String message, int status, String code, String tag) {
        super(message, status, code, tag);
    }
}
