package io.sigflow.hadoop;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * The same file system for Hadoop's FileContext ({@code fs.AbstractFileSystem.file.impl}), which
 * Spark's checkpoints on object stores and Delta's HDFS log store rename through: Hadoop's
 * {@code LocalFs} over {@code RawLocalFs}, with {@link InProcessRawLocalFileSystem} underneath.
 */
public class InProcessLocalFs extends ChecksumFs {

  public InProcessLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(FsConstants.LOCAL_FS_URI, conf));  // as Hadoop's LocalFs, whatever file:// URI it is given
  }

  /** Hadoop's RawLocalFs, whose constructors are not public. */
  static final class Raw extends DelegateToFileSystem {

    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new InProcessRawLocalFileSystem(), conf, FsConstants.LOCAL_FS_URI.getScheme(), false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }
}
