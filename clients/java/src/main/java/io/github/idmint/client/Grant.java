package io.github.idmint.client;

/** Grant is an instance's reply to a range request: the range [first, last], the tag's bounds and
 * the share of the region that granted it (null: its database has none). */
record Grant(long first, long last, long step, long maxStep, String tag, String requestId, boolean recovered,
        double runwaySeconds, Share region) {
    long size() {
        return last - first + 1;
    }
}
