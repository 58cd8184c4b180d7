import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.processor.ProcessorContext;

/**
 * The "nm_" topology families (issue 27: generated names, Branched, the old-style transformer context);
 * tests/conformance/topologies_nm.py is their Python half. Kept apart from Topologies.java so the families
 * other work adds there do not collide with these.
 */
final class NamingTopologies {
    private NamingTopologies() {}

    /** Writes value|topic/partition/offset/timestamp/header count from the old-style context. */
    static final class ContextEcho implements ValueTransformerWithKey<String, String, String> {
        private ProcessorContext context;

        @Override
        public void init(ProcessorContext context) {
            this.context = context;
        }

        @Override
        public String transform(String key, String value) {
            return value + "|" + context.topic() + "/" + context.partition() + "/" + context.offset() + "/"
                    + context.timestamp() + "/" + context.headers().toArray().length;
        }

        @Override
        public void close() { }
    }

    static Topologies.Spec build(String family, JsonNode p) {
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = Map.of("out", "string");
        switch (family) {
            case "nm_transform_values_context":
                b.<String, String>table("in").transformValues(ContextEcho::new).toStream().to("out");
                break;
            case "nm_branched": {
                // unnamed split(): branches <splitter><index>; a function's result replaces its branch,
                // a consumer's branch is left out of the map
                Map<String, KStream<String, String>> branches = b.<String, String>stream("in").split()
                        .branch((k, v) -> v.startsWith("a"), Branched.withFunction(s -> s.mapValues(v -> v + "!")))
                        .branch((k, v) -> v.startsWith("b"), Branched.withConsumer(s -> s.to("out-b")))
                        .branch((k, v) -> v.startsWith("c"), Branched.withFunction(s -> null, "c"))
                        .defaultBranch();
                if (branches.size() != 2) {
                    throw new IllegalStateException("expected 2 branches, got " + branches.keySet());
                }
                for (Map.Entry<String, KStream<String, String>> branch : new java.util.TreeMap<>(branches).entrySet()) {
                    branch.getValue().mapValues(v -> branch.getKey() + ":" + v).to("out");
                }
                outputs = Map.of("out", "string", "out-b", "string");
                break;
            }
            default:
                throw new IllegalArgumentException("unknown topology family " + family);
        }
        return new Topologies.Spec(b.build(), new java.util.TreeMap<>(outputs));
    }
}
