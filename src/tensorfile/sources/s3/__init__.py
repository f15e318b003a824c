"""``s3://`` objects read by tensorfile's own client.

It owns where an S3 URL leads and how to sign for it (:mod:`._s3config`), AWS Signature
Version 4 (:mod:`._sigv4`), and the S3 source on the HTTP transport, which hands over to
fsspec where it declines a URL (:mod:`.s3_source`).
"""
