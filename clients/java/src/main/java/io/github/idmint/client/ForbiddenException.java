package io.github.idmint.client;

/** ForbiddenException means the token's scopes do not cover the tag (403 {@code forbidden}); the message names the scope it needs. */
public final class ForbiddenException extends RefusedException {
    private static final long serialVersionUID = 1L;

    ForbiddenException(String message, int status, String code, String tag) {
        super(message, status, code, tag);
    }
}
