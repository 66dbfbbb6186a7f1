package io.github.idmint.client;

/**
 * RefusedException is an instance's final refusal of a request: a 4xx answer other than 408 and 429
 * (400 bad input, 401 the token, 403 its scopes, 404 the tag). Asking again, here or on another
 * instance, cannot change it, so the client never retries it: a refusal costs one request. The
 * subclasses name the common ones; any other is a RefusedException with its {@link #code()}.
 */
public class RefusedException extends IdmintException {
    private static final long serialVersionUID = 1L;

    RefusedException(String message, int status, String code, String tag) {
        super(message, status, code, tag, null);
    }

    /** Returns the refusal of an instance's answer, as the subclass that names it. */
    static RefusedException of(String message, int status, String code, String tag) {
        if (status == 401) {
            return new UnauthorizedException(message, status, code, tag);
        }
        if (status == 403) {
            return new ForbiddenException(message, status, code, tag);
        }
        if ("unknown_tag".equals(code)) {
            return new UnknownTagException(message, status, code, tag);
        }
        if ("invalid_biz_tag".equals(code)) {
            return new InvalidTagException(message, status, code, tag);
        }
        return new RefusedException(message, status, code, tag);
    }

    /** Returns the same refusal thrown again, with the stack of the call that meets it now. */
    RefusedException again() {
        return of(getMessage(), status(), code(), tag());
    }
}
