import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.ValueJoiner;

/**
 * The "opt_" topology families (issue 27 item 10: topology.optimization through StreamsBuilder.build(props));
 * tests/conformance/topologies_opt.py is their Python half. Every family is built with the scenario's
 * "optimization" parameter as topology.optimization. Kept apart from Topologies.java so the families other
 * work adds there do not collide with these.
 */
final class OptTopologies {
    private OptTopologies() {}

    private static final ValueJoiner<String, String, String> JOIN = (a, b) -> a + "+" + b;

    /** Output topics in the order given: the order outputs of one step are compared in (Map.of's is random). */
    private static Map<String, String> outs(String... pairs) {
        Map<String, String> outputs = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            outputs.put(pairs[i], pairs[i + 1]);
        }
        return outputs;
    }

    static Topologies.Spec build(String family, JsonNode p) {
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = outs("out", "string");
        switch (family) {
            case "opt_table_reuse": {
                // a named source table, read directly and joined by a stream
                KTable<String, String> table = b.table("in", Materialized.as("store"));
                table.toStream().to("out");
                b.<String, String>stream("left").join(table, JOIN).to("out-join");
                outputs = outs("out", "string", "out-join", "string");
                break;
            }
            case "opt_table_reuse_unnamed": {
                // an unnamed source table materialized by the join that reads it (a generated store name)
                KTable<String, String> table = b.table("in");
                b.<String, String>stream("left").leftJoin(table, JOIN).to("out");
                break;
            }
            case "opt_merge_repartition": {
                // one key change, two unnamed aggregations: one repartition topic for both
                KStream<String, String> keyed = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1));
                keyed.groupByKey().count().toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                keyed.groupByKey().reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_merge_named": {
                // a filter between the key change and one grouping, named stores and grouping, and the
                // re-keyed stream also written out
                KStream<String, String> keyed = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1));
                keyed.filter((k, v) -> !v.endsWith("x")).groupByKey().count(Materialized.as("counts"))
                        .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                keyed.groupByKey(Grouped.as("grouped")).reduce((a, c) -> a + c, Materialized.as("concat"))
                        .toStream().to("out2");
                keyed.to("keyed");
                outputs = outs("out", "long", "out2", "string", "keyed", "string");
                break;
            }
            case "opt_single_repartition": {
                b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1)).groupByKey().count()
                        .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = outs("out", "long");
                break;
            }
            case "opt_merge_join": {
                // a stream-table join and a count below one key change; the table's topic reused too
                KTable<String, String> users = b.table("users", Materialized.as("users"));
                KStream<String, String> keyed = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1));
                keyed.join(users, JOIN).to("out");
                keyed.groupByKey().count(Materialized.as("counts")).toStream()
                        .to("out2", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = outs("out", "string", "out2", "long");
                break;
            }
            case "opt_merge_group_by": {
                // groupBy's own key selection, its grouped stream counted and reduced
                org.apache.kafka.streams.kstream.KGroupedStream<String, String> grouped =
                        b.<String, String>stream("in").groupBy((k, v) -> v.substring(0, 1));
                grouped.count().toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                grouped.reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_merge_value_change": {
                // a mapValues between the key change and one grouping: that one keeps its own topic
                KStream<String, String> keyed = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1));
                keyed.mapValues(v -> v.toUpperCase()).groupByKey().reduce((a, c) -> a + c).toStream().to("out");
                keyed.groupByKey().reduce((a, c) -> c + a).toStream().to("out2");
                outputs = outs("out", "string", "out2", "string");
                break;
            }
            case "opt_below_merge": {
                // two key changes merged, then two groupings of the merge: one repartition below the merge
                KStream<String, String> merged = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1))
                        .merge(b.<String, String>stream("in2").selectKey((k, v) -> v.substring(0, 1)));
                merged.groupByKey().count().toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                merged.groupByKey().reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_below_merge_filter": {
                // a key change merged with a plain stream, a filter between the merge and one grouping
                KStream<String, String> merged = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1))
                        .merge(b.<String, String>stream("in2"));
                merged.filter((k, v) -> !v.endsWith("x")).groupByKey().count(Materialized.as("counts"))
                        .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                merged.groupByKey().reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_below_merge_value_change": {
                // a mapValues on one side of the merge: the groupings keep their own topics
                KStream<String, String> merged = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1))
                        .mapValues(v -> v.toUpperCase())
                        .merge(b.<String, String>stream("in2").selectKey((k, v) -> v.substring(0, 1)));
                merged.groupByKey().count().toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                merged.groupByKey().reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_below_merge_shared": {
                // the key change also grouped apart from the merge
                KStream<String, String> keyed = b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1));
                keyed.groupByKey().count().toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                keyed.merge(b.<String, String>stream("in2")).groupByKey().reduce((a, c) -> a + c).toStream().to("out2");
                outputs = outs("out", "long", "out2", "string");
                break;
            }
            case "opt_self_join": {
                KStream<String, String> in = b.stream("in");
                JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(
                        Duration.ofMillis(p.get("difference").asLong()), Duration.ofMillis(p.get("grace").asLong()));
                if (p.has("after")) {
                    windows = windows.after(Duration.ofMillis(p.get("after").asLong()));
                }
                in.join(in, JOIN, windows).to("out");
                break;
            }
            case "opt_self_left_join": {
                KStream<String, String> in = b.stream("in");
                in.leftJoin(in, JOIN, JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(10), Duration.ofMillis(5)))
                        .to("out");
                break;
            }
            default:
                throw new IllegalArgumentException("unknown topology family " + family);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, p.get("optimization").asText());
        return new Topologies.Spec(b.build(props), outputs);
    }
}
