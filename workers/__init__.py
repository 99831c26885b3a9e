"""The Celery layer: app configuration, thin tasks over `pipeline`, canvas building."""
