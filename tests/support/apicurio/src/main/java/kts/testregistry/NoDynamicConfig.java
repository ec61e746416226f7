package kts.testregistry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.ArrayList;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;
import javax.inject.Singleton;

/** The registry's dynamic settings are indexed at build time by an extension not on Maven Central: none here. */
@ApplicationScoped
public class NoDynamicConfig {
    @Produces
    @Singleton
    public DynamicConfigPropertyList properties() {
        return new DynamicConfigPropertyList(new ArrayList<>());
    }
}
