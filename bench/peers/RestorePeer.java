import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;

/**
 * kappaflow's restore bench peer: a table materialized as the persistent store "store", started on an
 * empty state directory so Kafka Streams restores it from "applicationId-store-changelog", which
 * bench/restore.py filled. Timed the way bench/restore.py times kappaflow: from the first restored batch
 * to the last one, counting the records restored after the first batch (so neither side's clock includes
 * start-up, the group join or the first fetch), and from {@code start()} to the state listener's RUNNING
 * (what a user waits for).
 *
 * <p>Args: bootstrap applicationId source stateDir records [serve]. Prints "RECORDS_PER_SECOND x",
 * "START_TO_RUNNING_S x" and "RESTORED n" on stdout and exits 0; exits 2 when the restore does not end in
 * time. With "serve" (bench/restore_crash.py) it runs exactly_once_v2 as the static member
 * "applicationId-0", prints "START_TO_RUNNING_S x" and "RESTORED n" once RUNNING and then processes until
 * it is killed: the crash and the recovery of the crash bench.
 */
public final class RestorePeer {
    private RestorePeer() {
    }

    public static void main(String[] args) throws InterruptedException {
        boolean serve = args.length == 6 && args[5].equals("serve");
        if (args.length != 5 && !serve) {
            System.err.println("usage: RestorePeer bootstrap appId source stateDir records [serve]");
            System.exit(64);
        }
        long records = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[3]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        if (serve) {
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), args[1] + "-0");
        }

        StreamsBuilder builder = new StreamsBuilder();
        builder.table(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()), Materialized.as("store"));

        AtomicLong firstBatchAt = new AtomicLong();
        AtomicLong firstBatchRecords = new AtomicLong();
        AtomicLong lastBatchAt = new AtomicLong();
        AtomicLong restored = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long count) {
                long now = System.nanoTime();
                long total = restored.addAndGet(count);
                if (firstBatchAt.compareAndSet(0, now)) {
                    firstBatchRecords.set(count);
                }
                lastBatchAt.set(now);
                if (total >= records) {
                    done.countDown();
                }
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
            }
        });
        CountDownLatch running = new CountDownLatch(1);
        AtomicLong runningAt = new AtomicLong();
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && runningAt.compareAndSet(0, System.nanoTime())) {
                running.countDown();
            }
        });
        long startedAt = System.nanoTime();
        streams.start();
        if (serve) {
            if (!running.await(5, TimeUnit.MINUTES)) {
                System.err.println("not RUNNING in 5 minutes");
                System.exit(2);
            }
            System.out.println("START_TO_RUNNING_S " + (runningAt.get() - startedAt) / 1e9);
            System.out.println("RESTORED " + restored.get());
            System.out.flush();
            Thread.sleep(Long.MAX_VALUE); // processing, until the bench kills the process
        }
        boolean finished = done.await(5, TimeUnit.MINUTES) && running.await(1, TimeUnit.MINUTES);
        streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                .withTimeout(Duration.ofSeconds(60)));
        if (!finished) {
            System.err.println("restored " + restored.get() + " of " + records + " records in 5 minutes");
            System.exit(2);
        }
        double seconds = (lastBatchAt.get() - firstBatchAt.get()) / 1e9;
        System.out.println("RESTORED " + restored.get());
        System.out.println("START_TO_RUNNING_S " + (runningAt.get() - startedAt) / 1e9);
        System.out.println("RECORDS_PER_SECOND " + (restored.get() - firstBatchRecords.get()) / seconds);
    }
}
