package io.sigflow.hadoop;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed local file system ({@code fs.file.impl}) over
 * {@link InProcessRawLocalFileSystem}. A {@link LocalFileSystem}, as {@code FileSystem.getLocal}
 * requires of whatever serves file://.
 */
public class InProcessLocalFileSystem extends LocalFileSystem {

  public InProcessLocalFileSystem() {
    super(new InProcessRawLocalFileSystem());
  }
}
