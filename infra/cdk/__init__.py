"""The CDK app: stage config, the app factory, stacks, constructs and the Docker-free layer build."""
