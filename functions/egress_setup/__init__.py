"""The egress path's CloudFormation custom resources (one Lambda, run at deploy only): the proxy's
CA made once into its two Secrets Manager secrets, and the id of the region's S3 managed prefix
list for the sessions' security groups. Imports nothing of ours: boto3 and `cryptography`."""
