"""Init step of compose-azure.yml: create the container named in the broker's config, retrying until Azurite answers."""

import time

from azure.core.exceptions import ResourceExistsError, ServiceRequestError
from azure.storage.blob import BlobServiceClient

from rsm.cli.properties import read_properties

props = read_properties("/etc/kafka/server.properties")
service = BlobServiceClient.from_connection_string(props["rsm.config.storage.azure.connection.string"])
container = props["rsm.config.storage.azure.container.name"]
for _attempt in range(60):
    try:
        service.create_container(container)
        print(f"created container {container}")
        break
    except ResourceExistsError:
        print(f"container {container} exists")
        break
    except ServiceRequestError:
        time.sleep(1)
else:
    raise SystemExit("Azurite did not answer within 60 s")
