package io.github.idmint.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Wire is the JSON of the range endpoints (the Go module's package wire): request bodies out,
 * replies in. IDs travel as decimal strings, since JSON numbers lose integers above 2^53 in many
 * languages.
 */
final class Wire {
    static final String PATH_SEGMENTS = "/v1/segments";
    static final String PATH_GIVE_BACK = "/v1/segments/giveback";

    private static final ObjectMapper JSON = new ObjectMapper();

    private Wire() {}

    /** The body of POST /v1/segments; a floor of 0 is left out. */
    static byte[] segmentRequest(Request req, long floor) {
        ObjectNode o = JSON.createObjectNode();
        o.put("biz_tag", req.tag());
        o.put("size", req.size());
        o.put("request_id", req.id());
        o.put("holder_key", req.holderKey());
        if (floor > 0) {
            o.put("floor", Long.toString(floor));
        }
        return bytes(o);
    }

    /** The body of POST /v1/segments/giveback. */
    static byte[] giveBackRequest(Request req, long first, long last) {
        ObjectNode o = JSON.createObjectNode();
        o.put("biz_tag", req.tag());
        o.put("request_id", req.id());
        o.put("holder_key", req.holderKey());
        o.put("first", Long.toString(first));
        o.put("last", Long.toString(last));
        return bytes(o);
    }

    private static byte[] bytes(ObjectNode o) {
        return o.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** Reads a reply of POST /v1/segments. */
    static Grant grant(byte[] body) throws IOException {
        JsonNode o = object(body);
        return new Grant(
                int64(o, "first"),
                int64(o, "last"),
                o.path("step").asLong(0),
                o.path("max_step").asLong(0),
                o.path("biz_tag").asText(""),
                o.path("request_id").asText(""),
                o.path("recovered").asBoolean(false),
                o.path("runway_seconds").asDouble(0),
                Share.fromJson(o.get("region")));
    }

    /** Reads given_back of a reply of POST /v1/segments/giveback. */
    static boolean givenBack(byte[] body) throws IOException {
        JsonNode v = object(body).get("given_back");
        if (v == null || !v.isBoolean()) {
            throw new IOException("reply without given_back");
        }
        return v.booleanValue();
    }

    /**
     * Returns the code and message of an error reply ({@code {"error":{"code","message"}}}), or
     * {@code http_error} and the status when the body is not one.
     */
    static String[] error(int status, byte[] body) {
        try {
            JsonNode e = object(body).path("error");
            String code = e.path("code").asText("");
            if (!code.isEmpty()) {
                return new String[] {code, e.path("message").asText("")};
            }
        } catch (IOException ignored) {
            // not JSON: a proxy's page, say
        }
        return new String[] {"http_error", "HTTP " + status};
    }

    private static JsonNode object(byte[] body) throws IOException {
        JsonNode o = JSON.readTree(body);
        if (o == null || !o.isObject()) {
            throw new IOException("reply is not a JSON object");
        }
        return o;
    }

    /** Reads a 64-bit integer written as a decimal string (or, leniently, a JSON integer). */
    static long int64(JsonNode o, String field) throws IOException {
        JsonNode v = o.get(field);
        if (v != null && v.isTextual()) {
            try {
                return Long.parseLong(v.textValue());
            } catch (NumberFormatException e) {
                throw new IOException(field + ": not a 64-bit integer: " + v.textValue());
            }
        }
        if (v != null && v.canConvertToLong() && v.isIntegralNumber()) {
            return v.longValue();
        }
        throw new IOException(field + ": missing or not a decimal string");
    }
}
