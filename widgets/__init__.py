"""The Qt user interface: main window, live plots, control panels."""
