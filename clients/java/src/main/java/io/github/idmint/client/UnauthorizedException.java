package io.github.idmint.client;

/** UnauthorizedException means an instance refused the token (401 {@code unauthorized}): none given, unknown or revoked. Fix the token. */
public final class UnauthorizedException extends RefusedException {
    private static final long serialVersionUID = 1L;

    UnauthorizedException(String message, int status, String code, String tag) {
        super(message, status, code, tag);
    }
}
