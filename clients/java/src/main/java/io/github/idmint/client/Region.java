package io.github.idmint.client;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Region is one of the client's regions: its instances and what the client keeps of it across its
 * stints (the Go client's region). A client of one list of URLs has one unnamed region.
 */
final class Region {
    final String name;
    /** In the client's regions; 0 is home. */
    final int index;
    /** Base URLs without a trailing slash. */
    final List<String> urls;
    /**
     * The highest ID the region granted to each tag, kept across stints: the floor sent with the
     * region's requests is its own, never another region's, whose IDs lie in another share.
     */
    private final Map<String, Long> floors = new ConcurrentHashMap<>();

    /** Moves away because it could not grant. */
    final AtomicLong left = new AtomicLong();
    /** Requests given up as ambiguous when it was left. */
    final AtomicLong abandoned = new AtomicLong();
    /** IDs of its stints never handed out nor given back. */
    final AtomicLong gap = new AtomicLong();

    Region(String name, int index, List<String> urls) {
        this.name = name;
        this.index = index;
        this.urls = List.copyOf(urls);
    }

    long floor(String tag) {
        return floors.getOrDefault(tag, 0L);
    }

    void raise(String tag, long last) {
        floors.merge(tag, last, Math::max);
    }
}
