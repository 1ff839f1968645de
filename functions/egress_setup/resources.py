"""What each custom resource does on Create, Update and Delete; returns the answer CloudFormation
gets. Clients are made when first used (moto can start first in the tests)."""

from __future__ import annotations

import functools
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from egress_setup.ca import is_ca_certificate, make_ca
from egress_setup.cfn_response import FAILED, SUCCESS, Outcome

CA_RESOURCE = "Custom::EgressCa"
PREFIX_LIST_RESOURCE = "Custom::ManagedPrefixList"


@functools.cache
def _client(service: str) -> Any:
    return boto3.client(service)


def handle(event: dict[str, Any]) -> Outcome:
    """Never raises: a failure is a FAILED answer naming what went wrong."""
    kind = event.get("ResourceType", "")
    request = event.get("RequestType", "")
    props = event.get("ResourceProperties") or {}
    physical = event.get("PhysicalResourceId") or event.get("LogicalResourceId", "unknown")
    try:
        if request == "Delete":
            # The CA lives in the secrets CloudFormation owns (deleted with them); a lookup leaves
            # nothing behind.
            return Outcome(SUCCESS, physical)
        if request not in ("Create", "Update"):
            return Outcome(FAILED, physical, reason=f"unknown request type {request!r}")
        if kind == CA_RESOURCE:
            return _ensure_ca(props)
        if kind == PREFIX_LIST_RESOURCE:
            return _prefix_list(props)
        return Outcome(FAILED, physical, reason=f"unknown resource type {kind!r}")
    except (ClientError, BotoCoreError, KeyError, ValueError) as exc:
        return Outcome(FAILED, physical, reason=f"{kind} {request} failed: {type(exc).__name__}: {exc}")


def _ensure_ca(props: dict[str, Any]) -> Outcome:
    """Make the CA once: a later Create (a retried deploy) or Update keeps the one the cert secret
    already holds, so sessions and the proxy never disagree about it. The key is written first and
    the certificate last: a certificate present means both are."""
    cert_arn, key_arn = props["CertSecretArn"], props["KeySecretArn"]
    secrets = _client("secretsmanager")
    current = secrets.get_secret_value(SecretId=cert_arn).get("SecretString", "")
    if is_ca_certificate(current):
        return Outcome(SUCCESS, cert_arn, reason="CA kept")
    pair = make_ca(str(props["CommonName"]), int(props["ValidityDays"]))
    secrets.put_secret_value(SecretId=key_arn, SecretString=pair.key_pem)
    secrets.put_secret_value(SecretId=cert_arn, SecretString=pair.cert_pem)
    return Outcome(SUCCESS, cert_arn, reason="CA made")


def _prefix_list(props: dict[str, Any]) -> Outcome:
    """The AWS-managed prefix list of a gateway endpoint service (`com.amazonaws.REGION.s3`)."""
    name = str(props["PrefixListName"])
    found = _client("ec2").describe_managed_prefix_lists(
        Filters=[{"Name": "prefix-list-name", "Values": [name]}]
    )["PrefixLists"]
    if len(found) != 1:
        return Outcome(
            FAILED, name, reason=f"expected one managed prefix list named {name}, found {len(found)}"
        )
    prefix_list_id = found[0]["PrefixListId"]
    return Outcome(SUCCESS, prefix_list_id, data={"PrefixListId": prefix_list_id})
