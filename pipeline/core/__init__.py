"""What every layer uses: settings, constants, the error hierarchy, logging, retry delays, prices."""
