import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.IndexType;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;

/**
 * kappaflow's bench peer for bench/scaling_cost.py: the same cell workload on Java Kafka Streams, so the
 * table shows how the real thing's throughput moves with partitions and distinct keys next to kappaflow's.
 *
 * <p>Topology (bench/scaling_cost.py's `topology`): each record re-keyed by its value through a repartition
 * topic and counted per key into the default cached, changelogged RocksDB store, the counts to a sink.
 * RocksDB is bounded the way scaling_cost.py bounds kappaflow's (BoundedMemoryConfigSetter): one LRU block
 * cache for every store of the process with index and filter blocks in it, memtables charged to it by one
 * write buffer manager, a quarter of the write-buffer budget per memtable, three per store, partitioned
 * index and filters.
 *
 * <p>Args: bootstrap applicationId source sink stateDir records cacheBytes rocksdbBytes writeBufferBytes.
 * Prints "RECORDS_PER_SECOND x" (input records, first processed to both sub-topologies done) and exits 0;
 * exits 2 when the count is not reached in time or the application fails. One stream thread,
 * at_least_once, every other setting at its default.
 */
public final class ScalingPeer {
    private static final Duration TIMEOUT = Duration.ofMinutes(30);

    /** The process's one RocksDB budget: Kafka Streams instantiates the setter per store by reflection. */
    private static Cache cache;
    private static WriteBufferManager writeBuffers;
    private static long writeBufferBytes;

    private ScalingPeer() {
    }

    /** Every store of the process shares the cache and the write buffer manager made in main. */
    public static final class BoundedMemory implements RocksDBConfigSetter {
        @Override
        public void setConfig(String storeName, Options options, Map<String, Object> configs) {
            BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
            table.setBlockCache(cache);
            table.setCacheIndexAndFilterBlocks(true);
            table.setCacheIndexAndFilterBlocksWithHighPriority(true);
            table.setPinL0FilterAndIndexBlocksInCache(true);
            table.setPinTopLevelIndexAndFilter(true);
            table.setIndexType(IndexType.kTwoLevelIndexSearch);
            table.setPartitionFilters(true);
            options.setTableFormatConfig(table);
            options.setWriteBufferManager(writeBuffers);
            options.setWriteBufferSize(Math.max(writeBufferBytes / 4, 1L << 20));
            options.setMaxWriteBufferNumber(3);
        }

        @Override
        public void close(String storeName, Options options) {
            // the cache and the manager are the process's, closed with it
        }
    }

    public static void main(String[] args) throws InterruptedException {
        if (args.length != 9) {
            System.err.println(
                    "usage: ScalingPeer bootstrap appId source sink stateDir records cacheBytes rocksdbBytes"
                            + " writeBufferBytes");
            System.exit(64);
        }
        long records = Long.parseLong(args[5]);
        long expected = 2 * records;  // both sub-topologies process each input record once
        writeBufferBytes = Long.parseLong(args[8]);
        RocksDB.loadLibrary();  // Kafka Streams loads it when the first store opens: the cache comes first
        cache = new LRUCache(Long.parseLong(args[7]));
        writeBuffers = new WriteBufferManager(writeBufferBytes, cache);

        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, Long.parseLong(args[6]));
        props.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedMemory.class);

        AtomicLong firstProcessed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .peek((key, value) -> firstProcessed.compareAndSet(0, System.nanoTime()))
                .groupBy((key, value) -> value, Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        PeerRun.timeAndExit(streams, expected, firstProcessed, TIMEOUT, "RECORDS_PER_SECOND", records);
    }
}
