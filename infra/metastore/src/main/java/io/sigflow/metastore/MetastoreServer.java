package io.sigflow.metastore;

import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.IHMSHandler;
import org.apache.hadoop.hive.metastore.RetryingHMSHandler;
import org.apache.hadoop.hive.metastore.TSetIpAddressProcessor;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;
import org.apache.thrift.transport.TTransportFactory;

/**
 * Hive's metastore over Thrift on one address: {@code MetastoreServer HOST PORT}.
 *
 * <p>Hive 2.3's {@code HiveMetaStore.main} listens on every interface and has no setting to
 * narrow it (Hive 4's, which has one, no longer answers the {@code get_table} call Spark's
 * built-in Hive client makes). The handler, its retries and its schema are Hive's own, configured
 * by the {@code hive-site.xml} on the classpath; only the socket is chosen here.
 */
public final class MetastoreServer {
  private MetastoreServer() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: MetastoreServer HOST PORT");
      System.exit(2);
    }
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    HiveMetaStore.HMSHandler base = new HiveMetaStore.HMSHandler("sigflow metastore", conf, false);
    IHMSHandler handler = RetryingHMSHandler.getProxy(conf, base, false);
    TServerSocket socket = new TServerSocket(new InetSocketAddress(host, port));
    TServer server = new TThreadPoolServer(new TThreadPoolServer.Args(socket)
        .processor(new TSetIpAddressProcessor<>(handler))
        .transportFactory(new TTransportFactory())
        .protocolFactory(new TBinaryProtocol.Factory())
        .minWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS))
        .maxWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS)));
    Runtime.getRuntime().addShutdownHook(new Thread(server::stop));
    System.out.println("metastore serving on " + host + ":" + port);
    System.out.flush();
    server.serve();
  }
}
