"""Install tooling: fetching, pinning and building what sigflow runs with (the Maven JARs and
the S3 log store, ``jars``; Data Docs' web assets, ``datadocs_assets``, which the quality
checks copy beside each site they build). Never imported by a job."""
