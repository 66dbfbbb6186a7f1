package io.github.idmint.client;

/**
 * SharesOverlapException means that two of the client's regions sent shares of the ID space that
 * may overlap, or that a region's reply came from a database of another region or of none: the
 * client may have been given the same ID by two regions. The range that showed it is not served (a
 * gap, never a duplicate), and from then on the client hands out no ID from any buffer or region:
 * every call throws this exception at once. It is neither an {@link UnavailableException} nor a
 * refusal of one request, and never worth a retry: the deployment's shares must be fixed
 * (docs/regions.md) and the client made again.
 */
public final class SharesOverlapException extends IdmintException {
    private static final long serialVersionUID = 1L;

    /** What the shares disagree on. */
    private final String detail;

    SharesOverlapException(String detail, String tag) {
        super("the regions' shares may overlap: the client hands out no more ids: " + detail, 0, null, tag, null);
        this.detail = detail;
    }

    /** Returns the same conflict, for a call on tag, with the stack of the call that meets it now. */
    SharesOverlapException again(String tag) {
        return new SharesOverlapException(detail, tag);
    }
}
