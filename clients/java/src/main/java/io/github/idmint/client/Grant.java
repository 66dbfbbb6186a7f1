package io.github.idmint.client;

/** Grant is an instance's reply to a range request: the range [first, last] and the tag's bounds. */
record Grant(long first, long last, long step, long maxStep, String tag, String requestId, boolean recovered,
        double runwaySeconds) {
    long size() {
        return last - first + 1;
    }
}
