"""Each site's artifact repository as an S3 endpoint over HTTP (`listener`), SigV4 as S3
checks it (`sigv4`), S3's error answers (`errors`) and the executor's client (`client`)."""
