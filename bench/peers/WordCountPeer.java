import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
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
 * kappaflow's bench peer: the word count of examples/wordcount.py on Java Kafka Streams, timed the way
 * bench/throughput.py times kappaflow (first record processed to the moment both sub-topologies have
 * processed lines + lines * words records), so the two numbers compare the same work on the same broker.
 *
 * <p>Args: bootstrap applicationId source sink stateDir processingGuarantee lines wordsPerLine.
 * Prints one line "LINES_PER_SECOND x" on stdout and exits 0; exits 2 when the count is not reached in
 * time or the application fails. One stream thread, default caching and commit interval.
 */
public final class WordCountPeer {
    private static final Pattern WORD = Pattern.compile("\\W+");
    private static final Duration TIMEOUT = Duration.ofMinutes(5);

    private WordCountPeer() {
    }

    static List<String> splitWords(String line) {
        List<String> words = new ArrayList<>();
        for (String word : WORD.split(line.toLowerCase(Locale.ROOT))) {
            if (!word.isEmpty()) {
                words.add(word);
            }
        }
        return words;
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 8) {
            System.err.println("usage: WordCountPeer bootstrap appId source sink stateDir guarantee lines words");
            System.exit(64);
        }
        long lines = Long.parseLong(args[6]);
        long expected = lines + lines * Long.parseLong(args[7]);

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

        AtomicLong firstProcessed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .peek((key, line) -> firstProcessed.compareAndSet(0, System.nanoTime()))
                .flatMapValues(WordCountPeer::splitWords)
                .groupBy((key, word) -> word, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        PeerRun.timeAndExit(streams, expected, firstProcessed, TIMEOUT, "LINES_PER_SECOND", lines);
    }
}
