"""The handout verb: what students get (``make handout``: the course without solutions or graders; for a lab, the
labs up to it on the package edition without its answers), the Colab route's class setup and the practice cells."""
