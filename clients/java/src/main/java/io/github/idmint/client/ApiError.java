package io.github.idmint.client;

/**
 * ApiError is an error answer from an idmint instance: its status, stable code and message. The
 * predicates below are the one place that decides what an answer means for the request (the Go
 * client's APIError has the same ones).
 */
final class ApiError extends Exception {
    private static final long serialVersionUID = 1L;

    final String url;
    final int status;
    final String code;
    final String text;
    /** The reply's Retry-After in milliseconds, 0 when none. */
    final long retryAfterMillis;

    ApiError(String url, int status, String code, String text, long retryAfterMillis) {
        super("idmint " + url + ": " + status + " " + code + ": " + text);
        this.url = url;
        this.status = status;
        this.code = code;
        this.text = text;
        this.retryAfterMillis = retryAfterMillis;
    }

    /**
     * Reports whether the answer says that nothing was granted for the request, now or later: a
     * refusal of the request itself, or a tag that cannot grant. Any other error may hide a grant,
     * and is retried under the same request ID.
     */
    boolean settled() {
        if (status == 429 || status == 408) {
            return false;
        }
        if (status >= 400 && status < 500) {
            return true;
        }
        return "rolled_back".equals(code) || "tag_exhausted".equals(code);
    }

    /** Reports whether the answer is the caller's as it is: a 4xx other than 408 and 429. */
    boolean isFinal() {
        return settled() && status >= 400 && status < 500;
    }

    /**
     * Reports whether the request ID is settled without a range for this client: another caller
     * holds it, it was used for another tag, or its range was given back in full.
     */
    boolean notOurs() {
        return "not_holder".equals(code) || "request_conflict".equals(code) || "given_back".equals(code);
    }

    /** Returns the answer as the caller's exception. */
    IdmintException toException(String tag) {
        String msg = text.contains("\"" + tag + "\"") ? text : "biz_tag \"" + tag + "\": " + text;
        msg = "idmint " + url + ": " + status + " " + code + ": " + msg;
        if (isFinal()) {
            return RefusedException.of(msg, status, code, tag);
        }
        return new UnavailableException(msg, status, code, tag, java.time.Duration.ofMillis(retryAfterMillis), this);
    }
}
