import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Pattern;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * bench/latency.py's Java peer: the word count of WordCountPeer (examples/wordcount.py's topology) with
 * Kafka Streams' defaults for everything but the guarantee, running until its standard input closes, so
 * the bench decides how long it serves a fixed input rate. Prints "RUNNING" once the application first
 * reaches RUNNING; exits 0 after a clean close, 2 if the application went to ERROR.
 *
 * <p>Args: bootstrap applicationId source sink stateDir processingGuarantee.
 */
public final class LatencyPeer {
    private static final Pattern WORD = Pattern.compile("\\W+");

    private LatencyPeer() {
    }

    /** WordCountPeer's split (each peer compiles on its own). */
    static List<String> splitWords(String line) {
        List<String> words = new ArrayList<>();
        for (String word : WORD.split(line.toLowerCase(Locale.ROOT))) {
            if (!word.isEmpty()) {
                words.add(word);
            }
        }
        return words;
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length != 6) {
            System.err.println("usage: LatencyPeer bootstrap appId source sink stateDir guarantee");
            System.exit(64);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(LatencyPeer::splitWords)
                .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch running = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                running.countDown();
            }
        });
        streams.start();
        running.await();
        System.out.println("RUNNING");
        System.out.flush();
        while (System.in.read() != -1) {
            // the bench closes our stdin to stop us
        }
        KafkaStreams.State last = streams.state();
        streams.close(Duration.ofSeconds(30));
        System.exit(last == KafkaStreams.State.ERROR ? 2 : 0);
    }
}
